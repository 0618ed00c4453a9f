//! The Lua scripts that make each queue step atomic.
//!
//! They follow the semantics of `Illuminate\Queue\LuaScripts` (protocol §3),
//! so PHP workers and this daemon can share a queue. Where Laravel would lose a
//! job or duplicate one, the script here says how and why it differs.
//!
//! Every script runs with `EVAL`; Redis caches the compiled script by its SHA,
//! so sending the text costs bandwidth only.

/// Reserve up to `count` jobs from the head of a ready list.
///
/// KEYS: ready list, reserved zset, notify list, and a key name of this
/// call's own (see below). ARGV\[1\]: reservation expiry, UNIX seconds
/// (now + `retry_after`). ARGV\[2\]: the most jobs to reserve (at least 1).
/// ARGV\[3\]: the size in bytes from which a job is set aside; ARGV\[4\]:
/// the size of the pieces it is set aside in.
///
/// For each job, like Laravel's pop: LPOP, decode, `attempts + 1`, re-encode
/// with cjson (this is the *reserved* string: keys reordered, `[]` turned to
/// `{}`, numbers at 14 significant digits), ZADD it to reserved, LPOP one
/// notify token. Returns `{original, reserved, poison}` per job, flattened,
/// in list order; an empty list when the queue is empty. One call with
/// `count` 1 is Laravel's pop; a larger `count` is that pop repeated inside
/// one atomic call, so PHP workers on the same queue see exactly what `count`
/// pops would have left.
///
/// Like Laravel, `attempts` may be a numeric string (`"0"`): Lua's `+ 1`
/// converts it, as `tonumber` does here, and the reserved copy holds a number.
///
/// Unlike Laravel: a payload that is not a JSON object with a numeric
/// `attempts` makes Laravel's script fail *after* its LPOP, so the job is lost.
/// Here it is reserved as its own bytes and its poison flag is `1`, so the
/// worker can move it to the failed store (and, should the worker die first,
/// it is reclaimed after `retry_after` like any reserved job).
///
/// Ours too: a job whose original is ARGV\[3\] bytes or more (a job of
/// megabytes) is not returned in the reply. Both its strings are set aside,
/// cut into pieces of ARGV\[4\] bytes, each `SET` under
/// `KEYS[4]:N:I` for 60 seconds (N: the string's place in the flattened
/// reply, I: the piece, from 1), and the reply holds the original's length
/// in bytes in its place and `{length, SHA-1}` of the reserved string in
/// its. The worker reads the pieces back one command at a time, so that no
/// reply is larger than one piece and the client's read buffer never grows
/// to the size of a job (see `RedisQueue::pop`). Should the worker never
/// read them, they expire; the reservation itself is as usual. Should
/// Redis evict them first (keys with a TTL go first under `maxmemory` with
/// a `volatile-*` policy), the worker reads the job from `:reserved` by
/// that digest instead ([`READ_RESERVED`]).
pub const POP: &str = r#"
local out = {}
for _ = 1, tonumber(ARGV[2]) do
    local original = redis.call('lpop', KEYS[1])
    if not original then
        break
    end
    local reserved = original
    local poison = 1
    local decoded_ok, job = pcall(cjson.decode, original)
    local attempts = nil
    if decoded_ok and type(job) == 'table' then
        attempts = tonumber(job['attempts'])
    end
    if attempts then
        job['attempts'] = attempts + 1
        local encoded_ok, encoded = pcall(cjson.encode, job)
        if encoded_ok then
            reserved = encoded
            poison = 0
        end
    end
    redis.call('zadd', KEYS[2], ARGV[1], reserved)
    redis.call('lpop', KEYS[3])
    if #original >= tonumber(ARGV[3]) then
        local piece = tonumber(ARGV[4])
        for place, text in ipairs({original, reserved}) do
            local key = KEYS[4] .. ':' .. (#out + place) .. ':'
            local n = 0
            for at = 1, #text, piece do
                n = n + 1
                redis.call('set', key .. n, string.sub(text, at, at + piece - 1), 'EX', 60)
            end
        end
        out[#out + 1] = #original
        out[#out + 1] = {#reserved, redis.sha1hex(reserved)}
    else
        out[#out + 1] = original
        out[#out + 1] = reserved
    end
    out[#out + 1] = poison
end
return out
"#;

/// Move the due members of a zset (delayed or reserved) to the ready list.
///
/// KEYS: source zset, ready list, notify list. ARGV\[1\]: now, UNIX seconds
/// (inclusive bound). ARGV\[2\]: the most to move, `-1` for all (Laravel's
/// `migration_batch_size`, 9.23+). ARGV\[3\]: the most payload bytes to
/// return.
///
/// Oldest first, to the *tail* of the ready list, one notify token per job.
/// Returns `{count, payload, …}`: how many moved and, as Laravel returns
/// them, the payloads moved, oldest first, as long as they fit within
/// ARGV\[3\] bytes (see [`crate::queue::migrated`]).
pub const MIGRATE_EXPIRED: &str = r#"
local due = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'limit', 0, ARGV[2])
local count = #due
if count == 0 then
    return {0}
end
redis.call('zremrangebyrank', KEYS[1], 0, count - 1)
for first = 1, count, 100 do
    local last = math.min(first + 99, count)
    redis.call('rpush', KEYS[2], unpack(due, first, last))
    local tokens = {}
    for i = first, last do
        tokens[#tokens + 1] = '1'
    end
    redis.call('rpush', KEYS[3], unpack(tokens))
end
local out = {count}
local budget = tonumber(ARGV[3])
for i = 1, count do
    budget = budget - #due[i]
    if budget < 0 then
        break
    end
    out[#out + 1] = due[i]
end
return out
"#;

/// Put a reserved job back into the delayed zset.
///
/// KEYS: delayed zset, reserved zset. ARGV\[1\]: the reserved string (exact
/// bytes), ARGV\[2\]: available-at, UNIX seconds, ARGV\[3\]: the member to
/// add: the reserved string itself for a release (so the attempt counts), or
/// the original string to hand a job back uncounted.
///
/// Unlike Laravel, nothing is added when the ZREM finds nothing: the
/// reservation was lost (another worker reclaimed the job after
/// `retry_after`), and Laravel's unconditional ZADD would then run the job
/// twice. Returns 1 when released, 0 when the reservation was gone.
pub const RELEASE: &str = r#"
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
    return 0
end
redis.call('zadd', KEYS[1], ARGV[2], ARGV[3])
return 1
"#;

/// Push a payload onto a ready list and wake one blocked worker.
///
/// KEYS: ready list, notify list. ARGV\[1\]: payload. Same as Laravel 5.8+.
pub const PUSH: &str = r#"
redis.call('rpush', KEYS[1], ARGV[1])
redis.call('rpush', KEYS[2], 1)
"#;

/// Extend a reservation that is still ours (lease renewal; not in Laravel).
///
/// KEYS: reserved zset. ARGV\[1\]: the reserved string, ARGV\[2\]: new expiry,
/// UNIX seconds. Returns 1 when extended, 0 when the member is gone.
pub const RENEW: &str = r#"
if redis.call('zscore', KEYS[1], ARGV[1]) then
    redis.call('zadd', KEYS[1], ARGV[2], ARGV[1])
    return 1
end
return 0
"#;

/// The Lua function the `*_BY_DIGEST` scripts share: the member of zset
/// `key` scored within `[low, high]` whose length is `len` and whose SHA-1
/// is `sha1` (lower-case hex), or `nil`. Lengths are compared first, so only
/// members of the same size are hashed.
macro_rules! find_by_digest {
    () => {
        r#"
local function find(key, low, high, len, sha1)
    for _, member in ipairs(redis.call('zrangebyscore', key, low, high)) do
        if #member == len and redis.sha1hex(member) == sha1 then
            return member
        end
    end
    return nil
end
"#
    };
}

/// `ZREM` of a large reserved member named by its digest instead of its
/// bytes (see [`super::member`]): the member of several megabytes is not
/// sent back to Redis.
///
/// KEYS: reserved zset. ARGV: lowest and highest score the reservation may
/// have (UNIX seconds), the member's length in bytes, its SHA-1 (hex).
/// Returns 1 when deleted, 0 when the reservation was gone.
pub const DELETE_BY_DIGEST: &str = concat!(
    find_by_digest!(),
    r#"
local member = find(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4])
if not member then
    return 0
end
redis.call('zrem', KEYS[1], member)
return 1
"#
);

/// [`RELEASE`] for a large reserved member named by its digest.
///
/// KEYS: delayed zset, reserved zset. ARGV: lowest and highest score, the
/// member's length, its SHA-1 (hex), available-at (UNIX seconds), and
/// optionally the member to add instead of the reserved one (the original
/// string, to hand a job back uncounted). Returns 1 when released, 0 when
/// the reservation was gone (nothing is added then, as in [`RELEASE`]).
pub const RELEASE_BY_DIGEST: &str = concat!(
    find_by_digest!(),
    r#"
local member = find(KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4])
if not member then
    return 0
end
redis.call('zrem', KEYS[2], member)
redis.call('zadd', KEYS[1], ARGV[5], ARGV[6] or member)
return 1
"#
);

/// [`RENEW`] for a large reserved member named by its digest.
///
/// KEYS: reserved zset. ARGV: lowest and highest score, the member's
/// length, its SHA-1 (hex), the new expiry (UNIX seconds). Returns 1 when
/// extended, 0 when the member is gone.
pub const RENEW_BY_DIGEST: &str = concat!(
    find_by_digest!(),
    r#"
local member = find(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4])
if not member then
    return 0
end
redis.call('zadd', KEYS[1], ARGV[5], member)
return 1
"#
);

/// One piece of a large reserved member named by its digest, for a job
/// whose set-aside pieces Redis evicted before the worker read them (see
/// [`POP`]).
///
/// KEYS: reserved zset. ARGV: the score the pop gave the member (UNIX
/// seconds), its length, its SHA-1 (hex), the first byte wanted (from 1),
/// how many bytes, and `1` to return the piece of the job as it was before
/// its attempt was counted (`attempts - 1`, re-encoded with cjson as the
/// pop encodes) rather than of the member itself. Returns the piece (empty
/// past the end), or nil when the member is gone.
pub const READ_RESERVED: &str = concat!(
    find_by_digest!(),
    r#"
local member = find(KEYS[1], ARGV[1], ARGV[1], tonumber(ARGV[2]), ARGV[3])
if not member then
    return false
end
if ARGV[6] == '1' then
    local job = cjson.decode(member)
    job['attempts'] = job['attempts'] - 1
    member = cjson.encode(job)
end
local from = tonumber(ARGV[4])
return string.sub(member, from, from + tonumber(ARGV[5]) - 1)
"#
);

/// Delete the four keys of a queue and return how many jobs they held.
///
/// KEYS: ready list, delayed zset, reserved zset, notify list.
pub const CLEAR: &str = r#"
local size = redis.call('llen', KEYS[1]) + redis.call('zcard', KEYS[2]) + redis.call('zcard', KEYS[3])
redis.call('del', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return size
"#;

/// Count a queue's jobs by state, and say when its oldest ready job was
/// pushed, without sending any job over the wire.
///
/// KEYS: ready list, delayed zset, reserved zset. ARGV\[1\]: now, UNIX
/// seconds; ARGV\[2\]: `1` to read the head job, anything else to leave
/// it (`pushed` is then `false`). Returns `{ready, delayed, delayed due by
/// now, reserved, pushed, head bytes}` (head bytes 0 when not read)
/// where `pushed` is the head job's top-level `createdAt` (Laravel
/// 12.11+) when it is a number (or a string of one), else the whole seconds of Horizon's
/// top-level `pushedAt` string, else `false` (nil): a string, `null` or
/// any other value never breaks the counts.
///
/// The members are read backwards from the payload's closing brace, a
/// value at a time, nested values skipped whole and never searched: a
/// `createdAt` inside `data` (or inside the log context) is not the job's.
/// Laravel writes `createdAt`, its hooks, `id`, `attempts` and `delay`
/// after `data`, so the reading stops well before the command, and at
/// most 16 KiB from the end (the script's `budget`) are looked at whatever the
/// job's size. Redis still copies the whole head job into the script (it
/// has no command to read part of a list element): about 100 ms for a
/// 50 MB job, during which it serves no one, so callers that need no age
/// leave the head alone and the backlog sampler reads a large head seldom
/// (see [`crate::metrics::backlog`]).
pub const QUEUE_SIZES: &str = r#"
local budget = 16384
local function member(s, wanted)
    local i = #s
    local stop = math.max(1, #s - budget)
    local byte = string.byte
    local function ws()
        local c = byte(s, i)
        while c == 32 or c == 9 or c == 10 or c == 13 do
            i = i - 1
            c = byte(s, i)
        end
    end
    -- i at a closing quote: the index of its opening quote, or nil.
    local function opening()
        local j = i - 1
        while j >= stop do
            if byte(s, j) == 34 then
                local k, n = j - 1, 0
                while byte(s, k) == 92 do
                    k, n = k - 1, n + 1
                end
                if n % 2 == 0 then
                    return j
                end
            end
            j = j - 1
        end
        return nil
    end
    -- i at a closing bracket: i moved before its opening one, or false.
    local function skip_nested()
        local depth = 0
        while i >= stop do
            local c = byte(s, i)
            if c == 34 then
                local o = opening()
                if not o then
                    return false
                end
                i = o
            elseif c == 125 or c == 93 then
                depth = depth + 1
            elseif c == 123 or c == 91 then
                depth = depth - 1
                if depth == 0 then
                    i = i - 1
                    return true
                end
            end
            i = i - 1
        end
        return false
    end
    ws()
    if byte(s, i) ~= 125 then
        return nil
    end
    i = i - 1
    while i >= stop do
        ws()
        local c, last = byte(s, i), i
        local value, kind
        if c == 34 then
            local o = opening()
            if not o then
                return nil
            end
            value, kind, i = string.sub(s, o + 1, last - 1), 'string', o - 1
        elseif c == 125 or c == 93 then
            if not skip_nested() then
                return nil
            end
            kind = 'nested'
        else
            while i >= stop and not string.find(string.char(byte(s, i)), '[,:{%[%s]') do
                i = i - 1
            end
            value, kind = string.sub(s, i + 1, last), 'scalar'
        end
        ws()
        if byte(s, i) ~= 58 then
            return nil
        end
        i = i - 1
        ws()
        if byte(s, i) ~= 34 then
            return nil
        end
        local o = opening()
        if not o then
            return nil
        end
        local key = string.sub(s, o + 1, i - 1)
        i = o - 1
        if key == wanted then
            return value, kind
        end
        ws()
        if byte(s, i) ~= 44 then
            return nil
        end
        i = i - 1
    end
    return nil
end
local pushed = false
local head = false
if ARGV[2] == '1' then
    head = redis.call('lindex', KEYS[1], 0)
end
if head then
    local at, kind = member(head, 'createdAt')
    if kind == 'scalar' or kind == 'string' then
        pushed = string.match(at, '^(%d+)%.?%d*$') or false
    end
    if not pushed then
        at, kind = member(head, 'pushedAt')
        if kind == 'string' then
            pushed = string.match(at, '^(%d+)%.?%d*$') or false
        end
    end
end
return {
    redis.call('llen', KEYS[1]),
    redis.call('zcard', KEYS[2]),
    redis.call('zcount', KEYS[2], '-inf', ARGV[1]),
    redis.call('zcard', KEYS[3]),
    pushed,
    head and #head or 0,
}
"#;

/// The queue's own scripts, so that an error raised inside one can be
/// traced to its line (see [`name_denied_script_command`]).
const QUEUE_SCRIPTS: &[&str] = &[
    POP,
    MIGRATE_EXPIRED,
    RELEASE,
    PUSH,
    RENEW,
    CLEAR,
    DELETE_BY_DIGEST,
    RELEASE_BY_DIGEST,
    RENEW_BY_DIGEST,
];

/// A queue script's refusal with the command the ACL user may not run
/// named (see [`crate::redis::name_denied_in_scripts`]); other errors pass
/// through.
pub fn name_denied_script_command(e: redis::RedisError) -> redis::RedisError {
    crate::redis::name_denied_in_scripts(e, QUEUE_SCRIPTS)
}
