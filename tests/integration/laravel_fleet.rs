//! A mixed fleet: one `php artisan queue:work` and two laravel-worker
//! daemons (persistent PHP bridge) consume one queue of 2,000 jobs
//! dispatched by the real app. Every job runs exactly once.

use crate::common;

use std::collections::HashMap;

use common::laravel::{self, Transport};
use common::{QueueState, q};
use serde_json::json;

const JOBS: usize = 2000;

#[test]
fn php_and_two_daemons_run_2000_jobs_exactly_once() {
    let Some((s, app, config)) = laravel::scene(Transport::Persistent(2)) else {
        return;
    };
    app.dispatch(json!([{"kind": "plain", "tag": "job", "count": JOBS}]));
    assert_eq!(s.redis.llen(&q("default")), JOBS as i64);

    let args = [
        "--stop-when-empty",
        "--sleep=0",
        "--json",
        "--concurrency=2",
    ];
    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
    let mut daemons = [s.work(&config, &args), s.work(&config, &args)];
    let status = php.wait();
    assert!(status.success(), "queue:work: {status}\n{}", php.output());
    for d in &mut daemons {
        d.expect_exit(0);
    }

    // Exactly once, first attempt, nothing failed.
    let mut runs: HashMap<String, usize> = HashMap::new();
    let mut by_runner: HashMap<String, usize> = HashMap::new();
    for r in app.records() {
        assert_eq!(r["event"], "handle", "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
        *runs
            .entry(r["tag"].as_str().unwrap().to_string())
            .or_default() += 1;
        *by_runner
            .entry(r["runner"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(runs.len(), JOBS, "every job ran");
    for i in 0..JOBS {
        assert_eq!(runs.get(&format!("job{i}")), Some(&1), "job{i}");
    }

    // Every worker took part, and each daemon settled what it reserved.
    let php_jobs = by_runner
        .get("Illuminate\\Queue\\Jobs\\RedisJob")
        .copied()
        .unwrap_or(0);
    let bridge_jobs = by_runner
        .get("LaravelWorker\\BridgeJob")
        .copied()
        .unwrap_or(0);
    assert_eq!(php_jobs + bridge_jobs, JOBS, "{by_runner:?}");
    assert!(php_jobs > 0, "queue:work ran none");
    let mut daemon_jobs = 0;
    for d in &daemons {
        let started = d.events_with("starting").len();
        let done = d.events_with("success").len();
        assert!(started > 0, "a daemon ran no job");
        assert_eq!(started, done, "every job a daemon reserved is done");
        daemon_jobs += done;
    }
    assert_eq!(
        daemon_jobs, bridge_jobs,
        "the daemons' jobs ran in the bridge"
    );
    s.assert_state(QueueState::empty());
}
