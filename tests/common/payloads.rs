//! Payloads exactly as Laravel writes them (protocol §5): PHP's
//! `json_encode` key order, `\/` escapes, `attempts: 0`, 32-char ids.

use serde_json::{Value, json};

/// A job payload under construction.
#[derive(Clone)]
pub struct Job {
    fields: Vec<(String, Value)>,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn id() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 32)
}

impl Job {
    /// A Laravel 8.83 object job (`dispatch(new App\Jobs\X)`).
    pub fn laravel8(class: &str) -> Self {
        let short = class.rsplit('\\').next().unwrap();
        let command = format!("O:{}:\"{class}\":1:{{s:5:\"queue\";N;}}", class.len());
        let _ = short;
        Job {
            fields: vec![
                ("uuid".into(), uuid().into()),
                ("displayName".into(), class.into()),
                (
                    "job".into(),
                    "Illuminate\\Queue\\CallQueuedHandler@call".into(),
                ),
                ("maxTries".into(), Value::Null),
                ("maxExceptions".into(), Value::Null),
                ("failOnTimeout".into(), false.into()),
                ("backoff".into(), Value::Null),
                ("timeout".into(), Value::Null),
                ("retryUntil".into(), Value::Null),
                (
                    "data".into(),
                    json!({"commandName": class, "command": command}),
                ),
                ("id".into(), id().into()),
                ("attempts".into(), 0.into()),
            ],
        }
    }

    /// Laravel 8 object jobs `App\Jobs\<name>`, one per name.
    pub fn named<const N: usize>(names: [&str; N]) -> [Self; N] {
        names.map(|n| Self::laravel8(&format!("App\\Jobs\\{n}")))
    }

    /// A Laravel 13 object job (adds deleteWhenMissingModels, batchId,
    /// createdAt and delay).
    pub fn laravel13(class: &str) -> Self {
        let mut job = Self::laravel8(class);
        job.fields
            .insert(10, ("deleteWhenMissingModels".into(), false.into()));
        if let Some((_, Value::Object(data))) = job.fields.iter_mut().find(|(k, _)| k == "data") {
            data.insert("batchId".into(), Value::Null);
        }
        let at = job.fields.len() - 2;
        job.fields
            .insert(at, ("createdAt".into(), super::now().into()));
        job.fields.push(("delay".into(), Value::Null));
        job
    }

    /// A string job (`Queue::push('App\Jobs\X@handle', $data)`).
    pub fn string(job: &str, data: Value) -> Self {
        let display = job.split('@').next().unwrap();
        Job {
            fields: vec![
                ("uuid".into(), uuid().into()),
                ("displayName".into(), display.into()),
                ("job".into(), job.into()),
                ("maxTries".into(), Value::Null),
                ("maxExceptions".into(), Value::Null),
                ("failOnTimeout".into(), false.into()),
                ("backoff".into(), Value::Null),
                ("timeout".into(), Value::Null),
                ("data".into(), data),
                ("id".into(), id().into()),
                ("attempts".into(), 0.into()),
            ],
        }
    }

    /// `n` string jobs `job` with data `{"i": 0}` to `{"i": n - 1}`.
    pub fn numbered(job: &str, n: i64) -> Vec<Self> {
        (0..n)
            .map(|i| Self::string(job, json!({ "i": i })))
            .collect()
    }

    /// Sets (or adds) a top-level field.
    pub fn set(mut self, key: &str, value: Value) -> Self {
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(field) => field.1 = value,
            None => self.fields.push((key.into(), value)),
        }
        self
    }

    /// Top-level field `key` (null when absent).
    pub fn get(&self, key: &str) -> Value {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or(Value::Null)
    }

    /// The job-log line `Scene::recording_script` writes for a call of
    /// this job: `MODE NAME ID ATTEMPT QUEUE`.
    pub fn line(&self, mode: &str, attempt: i64, queue: &str) -> String {
        let name = self.get("displayName");
        format!(
            "{mode} {} {} {attempt} {queue}",
            name.as_str().unwrap_or_default(),
            self.id()
        )
    }

    /// The job-log line of run `attempt` on `default`.
    pub fn run_line(&self, attempt: i64) -> String {
        self.line("run", attempt, "default")
    }

    /// The job-log line of the failed-mode call after `attempt` on `default`.
    pub fn failed_line(&self, attempt: i64) -> String {
        self.line("failed", attempt, "default")
    }

    /// The `uuid` field.
    pub fn uuid(&self) -> String {
        self.get("uuid").as_str().unwrap().to_string()
    }

    /// The `id` field (32 characters).
    pub fn id(&self) -> String {
        self.get("id").as_str().unwrap().to_string()
    }

    /// The payload text as PHP's `json_encode(..., JSON_UNESCAPED_UNICODE)`
    /// writes it: insertion order, `/` escaped.
    pub fn build(&self) -> String {
        let parts: Vec<String> = self
            .fields
            .iter()
            .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v))
            .collect();
        format!("{{{}}}", parts.join(",")).replace('/', "\\/")
    }
}
