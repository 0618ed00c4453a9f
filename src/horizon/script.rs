//! One Lua call writes a whole batch of Horizon records.
//!
//! Every step of every job in a batch becomes an *op* of [`RECORDS`],
//! applied in order (built by [`super::ops`]), as Horizon's `RedisJobRepository` (`pushed`,
//! `reserved`, `released`, `migrated`, `completed`, `remember`, `failed`),
//! `TagRepository` and `updateMetrics` script would write it, but in one
//! round trip and one script call (by its SHA1) for the batch, instead of
//! a script and four commands per job. Each op runs under `pcall`: a key
//! Redis refuses (a wrong type, an ACL, `maxmemory`) costs that op, not
//! the batch; the call returns how many ops failed and the first error.
//!
//! Every key an op touches is passed in `KEYS` (on a cluster they share the
//! braced prefix's slot).

use bytes::Bytes;

use super::keys::Keys;
use crate::redis::RedisConn;

/// The fixed keys, `KEYS[1..=10]`, by their names under the prefix.
pub const FIXED_KEYS: [&str; 10] = [
    "recent_jobs",
    "pending_jobs",
    "completed_jobs",
    "silenced_jobs",
    "failed_jobs",
    "recent_failed_jobs",
    "monitored_jobs",
    "monitoring",
    "measured_jobs",
    "measured_queues",
];

/// `KEYS` index of `measured_jobs`.
pub const MEASURED_JOBS: usize = 9;
/// `KEYS` index of `measured_queues`.
pub const MEASURED_QUEUES: usize = 10;

/// Horizon's `updateRetryInformationOnParent`, in Lua: sets the status
/// of retry `id` in the `retried_by` list of `parent` (a hash key);
/// returns whether the list had `id` (Horizon's `RetryFailedJob` pushes
/// the retry before it adds it there). Shared by [`RECORDS`] and
/// [`super::late::SCRIPT`].
macro_rules! retried_lua {
    () => {
        r"local function retried(parent, id, status)
  local text = redis.call('HGET', parent, 'retried_by')
  if not text then return false end
  local ok, retries = pcall(cjson.decode, text)
  if not ok or type(retries) ~= 'table' then return false end
  local found = false
  for _, retry in ipairs(retries) do
    if type(retry) == 'table' and retry['id'] == id then
      retry['status'] = status
      found = true
    end
  end
  if found then
    redis.call('HSET', parent, 'retried_by', cjson.encode(retries))
  end
  return found
end
"
    };
}
pub(crate) use retried_lua;

/// The retry `laravel-worker retry` recorded in a record's own
/// `retried_by` ([`super::retried`]): sets the status of the newest
/// `pending` entry naming the job itself, when the job's run ends.
macro_rules! own_retry_lua {
    () => {
        r"local function own_retry(hash, id, status)
  local text = redis.call('HGET', hash, 'retried_by')
  if not text then return end
  local ok, retries = pcall(cjson.decode, text)
  if not ok or type(retries) ~= 'table' then return end
  for i = #retries, 1, -1 do
    local retry = retries[i]
    if type(retry) == 'table' and retry['id'] == id and retry['status'] == 'pending' then
      retry['status'] = status
      redis.call('HSET', hash, 'retried_by', cjson.encode(retries))
      return
    end
  end
end
"
    };
}

/// The batch script. ARGV\[1\]: the connection name; then the ops:
///
/// - `R` (reserved), `L` (released), `M` (migrated): hash, id, queue, name,
///   payload, time, pending expiry, score (-time), tag count, then
///   (tag, tag key) pairs. A hash that does not exist is first made as
///   `pushed()` makes it (with the recent and pending entries, the
///   expiry, and the job in each monitored tag's list).
/// - `C` (completed): hash, id, time, expiry, score, silenced (0/1),
///   retry parent's hash (0: none), pushed (the payload's `"pushedAt":…`
///   text, empty: none), tag count, the tags, then when there are tags:
///   queue, name, payload, monitored expiry (for `remember`).
/// - `F` (failed): hash, id, queue, name, payload, exception, time,
///   expiry, score, retry parent's hash (0: none), `failed:{tag}` seconds
///   to live, pushed, tag count, then (tag, tag key, `failed:{tag}` key)
///   triples.
/// - `D` (reserved, then completed, in one batch; see [`super::ops`]):
///   hash, id, queue, name, payload, reserved time, recent score,
///   completed time, completed score, expiry, silenced (0/1), pushed.
/// - `S` (completed, written with the delete, see [`super::companion`]):
///   hash, id, queue, name, payload, time, score, expiry, silenced (0/1),
///   retry parent's hash (0: none), tag count, (tag, tag key) pairs,
///   monitored expiry: what `R` then `C` leave, a hash that does not exist
///   made whole (reserved at that time).
/// - `T` (metrics): hash, measured set, run count, the runtimes (ms).
///
/// A job's `R` finds its record already `completed` or `failed` with the
/// same (reserved) payload when the settle wrote it (`S`, or `F`, with the
/// delete) before the writer got to the reservation: it then leaves the
/// record as it is. So `F` and `S` make a record that does not exist as
/// `R` makes it (the `recent_jobs` entry, the job in each monitored tag's
/// list, `created_at` = `updated_at` = `reserved_at`, the last so a later
/// op knows the worker made it): the settle that lands first leaves what
/// `R` then the settle leave (an `F` without the `recent_jobs` entry made
/// the dashboard's recent list lose a failed job whenever the writer was
/// slower than the job). Nor does an `R`, `L` or `M` older than the
/// record's end (its time before `completed_at`): the writer sends a step
/// it was given before the settle (a migration, say, whose batch waited
/// out a dropped connection) after the delete's `S` or `F` made the
/// record final, and that step belongs to an earlier reservation (a job
/// whose `M` made it `pending` again after it completed stayed pending
/// on the dashboard for ever).
///
/// Hashes and keys are given as indexes into `KEYS`. Each op reads all its
/// arguments before its first write, so one that fails leaves the next
/// op's arguments in place.
///
/// Returns `{failed ops, first error, watched ids}`: the ids of the jobs
/// whose final state a producer's write may still undo ([`super::late`]):
/// a record this worker created (its `created_at` is its `reserved_at`)
/// for a payload pushed through Horizon's connector, whose `pending`
/// record has not landed yet; or a retry whose parent's `retried_by`
/// does not list it yet.
/// The text of [`RECORDS`], for [`COMPANION`] too.
macro_rules! records_lua {
    () => {
        concat!(
            r"
local conn = ARGV[1]
local at = 2
local function take()
  local value = ARGV[at]
  at = at + 1
  return value
end
local function key()
  return KEYS[tonumber(take())]
end
local function take_many(n)
  local first = at
  at = at + n
  return unpack(ARGV, first, first + n - 1)
end
local function monitored(tag)
  return redis.call('SISMEMBER', KEYS[8], tag) == 1
end
local watched = {}
local function watch(id)
  watched[#watched + 1] = id
end
local function settled(hash, payload)
  local status = redis.call('HGET', hash, 'status')
  if status ~= 'completed' and status ~= 'failed' then return false end
  return redis.call('HGET', hash, 'payload') == payload
end
local function ended_after(hash, time)
  local at = redis.call('HMGET', hash, 'status', 'completed_at')
  if at[1] ~= 'completed' and at[1] ~= 'failed' then return false end
  return tonumber(at[2] or '') ~= nil and tonumber(at[2]) > tonumber(time)
end
local function ours(hash)
  local at = redis.call('HMGET', hash, 'created_at', 'reserved_at')
  return at[1] ~= false and at[1] == at[2]
end
",
            retried_lua!(),
            own_retry_lua!(),
            r"local function step(op)
  if op == 'R' or op == 'L' or op == 'M' then
    local hash = key()
    local id, queue, name, payload, time, expiry, score = take_many(7)
    local tags = {}
    for t = 1, tonumber(take()) do
      local tag = take()
      tags[t] = {tag, key()}
    end
    if op == 'R' and settled(hash, payload) then return end
    if ended_after(hash, time) then return end
    if redis.call('EXISTS', hash) == 0 then
      redis.call('HSET', hash, 'id', id, 'connection', conn, 'queue', queue, 'name', name,
        'created_at', time)
      redis.call('ZADD', KEYS[1], score, id)
      redis.call('ZADD', KEYS[2], score, id)
      redis.call('EXPIREAT', hash, expiry)
      for _, tag in ipairs(tags) do
        if monitored(tag[1]) then redis.call('ZADD', tag[2], time, id) end
      end
    end
    if op == 'R' then
      redis.call('HSET', hash, 'status', 'reserved', 'payload', payload, 'updated_at', time,
        'reserved_at', time)
    else
      redis.call('HSET', hash, 'status', 'pending', 'payload', payload, 'updated_at', time)
    end
  elseif op == 'C' then
    local hash = key()
    local id, time, expiry, score, silenced, parent, pushed = take_many(7)
    silenced = silenced == '1'
    parent = tonumber(parent)
    local tags = {}
    for t = 1, tonumber(take()) do tags[t] = take() end
    local queue, name, payload, kept
    if #tags > 0 then
      queue, name, payload, kept = take_many(4)
    end
    local late = parent > 0 and not retried(KEYS[parent], id, 'completed')
    if parent == 0 then own_retry(hash, id, 'completed') end
    redis.call('ZADD', silenced and KEYS[4] or KEYS[3], score, id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HSET', hash, 'status', 'completed', 'completed_at', time)
    redis.call('EXPIREAT', hash, expiry)
    local watched = false
    for _, tag in ipairs(tags) do
      if monitored(tag) then watched = true end
    end
    if watched then
      redis.call('ZADD', KEYS[7], score, id)
      redis.call('HSET', hash, 'id', id, 'connection', conn, 'queue', queue, 'name', name,
        'status', 'completed', 'payload', payload, 'completed_at', time)
      redis.call('EXPIREAT', hash, kept)
    end
    if late or (pushed ~= '' and ours(hash)) then watch(id) end
  elseif op == 'F' then
    local hash = key()
    local id, queue, name, payload, exception, time, expiry, score, parent, ttl, pushed =
      take_many(11)
    parent = tonumber(parent)
    local tags = {}
    for t = 1, tonumber(take()) do
      local tag = take()
      tags[t] = {tag, key(), key()}
    end
    local late = parent > 0 and not retried(KEYS[parent], id, 'failed')
    if redis.call('EXISTS', hash) == 0 then
      -- What the reservation's `R` would have made: the delete's `F`
      -- often lands first, and that `R` then leaves the record as it is.
      redis.call('HSET', hash, 'created_at', time, 'updated_at', time, 'reserved_at', time)
      redis.call('ZADD', KEYS[1], score, id)
      for _, tag in ipairs(tags) do
        if monitored(tag[1]) then redis.call('ZADD', tag[2], time, id) end
      end
      if pushed ~= '' then watch(id) end
    else
      if parent == 0 then own_retry(hash, id, 'failed') end
      if late or (pushed ~= '' and ours(hash)) then watch(id) end
    end
    redis.call('ZADD', KEYS[5], score, id)
    redis.call('ZADD', KEYS[6], score, id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
    redis.call('HSET', hash, 'id', id, 'connection', conn, 'queue', queue, 'name', name,
      'status', 'failed', 'payload', payload, 'exception', exception, 'completed_at', time,
      'failed_at', time)
    redis.call('EXPIREAT', hash, expiry)
    for _, tag in ipairs(tags) do
      redis.call('ZADD', tag[3], time, id)
      redis.call('EXPIRE', tag[3], ttl)
    end
  elseif op == 'D' then
    local hash = key()
    local id, queue, name, payload, reserved, recent, time, score, expiry, silenced, pushed =
      take_many(11)
    if redis.call('EXISTS', hash) == 0 then
      if pushed ~= '' then watch(id) end
      redis.call('HSET', hash, 'id', id, 'connection', conn, 'queue', queue, 'name', name,
        'created_at', reserved, 'status', 'completed', 'payload', payload,
        'updated_at', reserved, 'reserved_at', reserved, 'completed_at', time)
      redis.call('ZADD', KEYS[1], recent, id)
    else
      if ours(hash) then
        if pushed ~= '' then watch(id) end
        redis.call('HSET', hash, 'created_at', reserved)
      end
      own_retry(hash, id, 'completed')
      redis.call('HSET', hash, 'status', 'completed', 'payload', payload,
        'updated_at', reserved, 'reserved_at', reserved, 'completed_at', time)
      redis.call('ZREM', KEYS[2], id)
    end
    redis.call('ZADD', silenced == '1' and KEYS[4] or KEYS[3], score, id)
    redis.call('EXPIREAT', hash, expiry)
  elseif op == 'S' then
    local hash = key()
    local id, queue, name, payload, time, score, expiry, silenced, parent = take_many(9)
    parent = tonumber(parent)
    local tags = {}
    for t = 1, tonumber(take()) do
      local tag = take()
      tags[t] = {tag, key()}
    end
    local kept = take()
    if parent > 0 then retried(KEYS[parent], id, 'completed') end
    local watched = false
    for _, tag in ipairs(tags) do
      if monitored(tag[1]) then watched = true end
    end
    if redis.call('EXISTS', hash) == 0 then
      redis.call('HSET', hash, 'id', id, 'connection', conn, 'queue', queue, 'name', name,
        'created_at', time, 'updated_at', time, 'reserved_at', time)
      redis.call('ZADD', KEYS[1], score, id)
      for _, tag in ipairs(tags) do
        if monitored(tag[1]) then redis.call('ZADD', tag[2], time, id) end
      end
    else
      if parent == 0 then own_retry(hash, id, 'completed') end
      if redis.call('HEXISTS', hash, 'reserved_at') == 0 then
        -- The producer's record, reached before the reservation's `R`,
        -- which then leaves the completed record as it is.
        redis.call('HSET', hash, 'updated_at', time, 'reserved_at', time)
      end
    end
    redis.call('HSET', hash, 'status', 'completed', 'payload', payload, 'completed_at', time)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZADD', silenced == '1' and KEYS[4] or KEYS[3], score, id)
    redis.call('EXPIREAT', hash, expiry)
    if watched then
      redis.call('ZADD', KEYS[7], score, id)
      redis.call('EXPIREAT', hash, kept)
    end
  elseif op == 'T' then
    local hash = key()
    local set = key()
    local runs = {}
    for r = 1, tonumber(take()) do runs[r] = tonumber(take()) end
    redis.call('HSETNX', hash, 'throughput', 0)
    redis.call('SADD', set, hash)
    local before = redis.call('HMGET', hash, 'throughput', 'runtime')
    local count = tonumber(before[1])
    local mean = before[2] and tonumber(before[2])
    for _, run in ipairs(runs) do
      if mean then
        mean = ((count * mean) + run) / (count + 1)
      else
        mean = run
      end
      count = count + 1
    end
    redis.call('HMSET', hash, 'throughput', count, 'runtime', mean)
  else
    error('unknown op ' .. tostring(op))
  end
end
local failed = 0
local first = nil
while at <= #ARGV do
  local op = take()
  local ok, err = pcall(step, op)
  if not ok then
    failed = failed + (op == 'D' and 2 or 1)
    if type(err) == 'table' then err = err['err'] end
    first = first or tostring(err)
  end
end
return {failed, first or '', watched}
"
        )
    };
}

/// The batch script, whose ops `records_lua!` above describes.
pub const RECORDS: &str = records_lua!();

/// The body of the delete script Horizon's companion gives
/// ([`super::companion`]): [`RECORDS`], after a lean path for the commonest
/// delete, a job that ran to completion with no tags and no `retry_of`.
/// That path gets the member the delete removed as the payload (the
/// companion's `member`), so the payload is sent once, and writes the
/// final record with a few commands, without the batch script's setup.
///
/// Its `ARGV`: `"\0done"` (no connection name is that), id, connection,
/// queue, name, reservation time, its recent score, completion time, its
/// score, the completed expiry; `KEYS`: the record, `recent_jobs`,
/// `pending_jobs`, `completed_jobs` (or `silenced_jobs`). It leaves what
/// `R` then `C` leave, with the run's own `reserved_at` (a record of an
/// earlier run, the producer's `pending` one or a retried failure's, gets
/// this run's); the writer then writes only the run's metrics
/// ([`super::ops`]).
pub const COMPANION: &str = concat!(
    own_retry_lua!(),
    r"if ARGV[1] == '\0done' then
  local hash = KEYS[1]
  local id, conn, queue, name, reserved, recent, time, score, expiry = unpack(ARGV, 2, 10)
  if redis.call('EXISTS', hash) == 0 then
    redis.call('HSET', hash, 'id', id, 'connection', conn, 'queue', queue, 'name', name,
      'created_at', reserved, 'updated_at', reserved, 'reserved_at', reserved,
      'status', 'completed', 'payload', member, 'completed_at', time)
    redis.call('ZADD', KEYS[2], recent, id)
  else
    own_retry(hash, id, 'completed')
    -- A record this worker made (its `created_at` is its `reserved_at`)
    -- stays recognisable as such with this run's `reserved_at`.
    local made = redis.call('HMGET', hash, 'created_at', 'reserved_at')
    if made[1] and made[1] == made[2] then
      redis.call('HSET', hash, 'created_at', reserved)
    end
    redis.call('HSET', hash, 'status', 'completed', 'payload', member, 'updated_at', reserved,
      'reserved_at', reserved, 'completed_at', time)
    redis.call('ZREM', KEYS[3], id)
  end
  redis.call('ZADD', KEYS[4], score, id)
  redis.call('EXPIREAT', hash, expiry)
  return
end
",
    records_lua!()
);

/// A batch being built: its keys and its ops' arguments.
///
/// The arguments are written as they come into one buffer (a
/// [`redis::Cmd`] used only as such): no string of their own each, and
/// one copy into the `EVALSHA` command at the end.
pub struct Batch<'a> {
    keys: &'a Keys,
    names: Vec<String>,
    args: redis::Cmd,
    records: usize,
}

impl<'a> Batch<'a> {
    /// An empty batch for `connection` (the hashes' `connection` field).
    pub fn new(keys: &'a Keys, connection: &str) -> Self {
        let mut args = redis::Cmd::new();
        args.arg(connection);
        Batch {
            keys,
            names: FIXED_KEYS.iter().map(|k| keys.key(k)).collect(),
            args,
            records: 0,
        }
    }

    /// Records added so far (an op writes one, a `D` op two): what a
    /// refused batch cost.
    pub fn len(&self) -> usize {
        self.records
    }

    /// Starts an op that writes one record.
    pub fn op(&mut self, code: &'static str) -> &mut Self {
        self.op_of(code, 1)
    }

    /// Starts an op that writes `records` records.
    pub fn op_of(&mut self, code: &'static str, records: usize) -> &mut Self {
        self.records += records;
        self.args.arg(code);
        self
    }

    /// Adds `name` (under the prefix) to `KEYS` and its index to the op.
    pub fn key(&mut self, name: &str) -> &mut Self {
        let index = self.key_index(name);
        self.text(index)
    }

    /// Adds `name` (under the prefix) to `KEYS`; its index there.
    pub fn key_index(&mut self, name: &str) -> usize {
        self.names.push(self.keys.key(name));
        self.names.len()
    }

    /// Adds an argument: text, or a number written as Redis writes it.
    pub fn text(&mut self, value: impl redis::ToRedisArgs) -> &mut Self {
        self.args.arg(value);
        self
    }

    /// Adds a payload.
    pub fn payload(&mut self, payload: &Bytes) -> &mut Self {
        self.args.arg(&payload[..]);
        self
    }

    /// The batch's keys and arguments, for a script call made elsewhere
    /// (see [`super::companion`]).
    pub fn into_parts(self) -> (Vec<String>, Vec<Bytes>) {
        let args = self
            .args
            .args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(Bytes::copy_from_slice(bytes)),
                _ => None,
            })
            .collect();
        (self.names, args)
    }

    /// The `EVALSHA` of `script` for the batch: its SHA1, the keys, the
    /// arguments (see [`call`] for the call itself).
    pub fn command(&self, script: &redis::Script) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(self.names.len());
        for name in &self.names {
            cmd.arg(name);
        }
        for arg in self.args.args_iter() {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

/// Runs `cmd` (an `EVALSHA` of `script`, see [`Batch::command`]); when
/// Redis does not know the script yet (`NOSCRIPT`: a restart, a
/// `SCRIPT FLUSH`, a failover), loads it and runs `cmd` again, once.
///
/// # Errors
/// What Redis answers, or the connection's error.
pub async fn call<T: redis::FromRedisValue>(
    cmd: &redis::Cmd,
    script: &redis::Script,
    conn: &mut RedisConn,
) -> redis::RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if crate::redis::is_noscript(&e) => {
            script.prepare_invoke().load_async(conn).await?;
            cmd.query_async(conn).await
        }
        other => other,
    }
}
