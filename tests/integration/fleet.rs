//! Several daemons on one queue: every job runs exactly once, each daemon
//! keeps queue priority, and no bookkeeping is left behind.

use crate::common;

use std::collections::HashMap;

use common::{Job, QueueState, Scene, q};
use serde_json::json;

#[test]
fn two_daemons_run_2000_jobs_exactly_once_in_priority_order() {
    let s = Scene::new();
    let log_id = "echo \"$LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_QUEUE\" >> \"$LOG\"";
    let config = s.config().script(log_id).write();

    let mut pushed: HashMap<String, &str> = HashMap::new();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        let queue = if i % 2 == 0 { "high" } else { "default" };
        let job = Job::string("App\\Jobs\\Fleet@handle", json!({ "i": i }));
        pipe.rpush(q(queue), job.build())
            .rpush(format!("{}:notify", q(queue)), 1);
        pushed.insert(job.id(), queue);
    }
    let _: () = pipe.query(&mut s.redis.conn(0)).unwrap();

    let args = common::DRAIN_HIGH_THEN_DEFAULT;
    let mut daemons = [s.work(&config, &args), s.work(&config, &args)];
    for d in &mut daemons {
        d.expect_exit(0);
    }

    // Exactly once: every pushed id ran one time, on the queue it was pushed to.
    let mut runs: HashMap<String, usize> = HashMap::new();
    for line in s.log() {
        let (id, queue) = line.split_once(' ').expect("ID QUEUE lines");
        assert_eq!(
            pushed.get(id).copied(),
            Some(queue),
            "unknown or misplaced job {line}"
        );
        *runs.entry(id.to_string()).or_default() += 1;
    }
    assert_eq!(runs.len(), 2000, "every job ran");
    let twice: Vec<&String> = runs
        .iter()
        .filter(|(_, n)| **n != 1)
        .map(|(id, _)| id)
        .collect();
    assert!(twice.is_empty(), "jobs ran more than once: {twice:?}");

    // Priority within each daemon: once it took a default job, no high job
    // was left for it to take.
    let mut reserved_total = 0;
    for d in &daemons {
        let order = d.event_fields("starting", "queue");
        reserved_total += order.len();
        if let Some(first_default) = order.iter().position(|q| q == "default") {
            assert!(
                order[first_default..].iter().all(|q| q == "default"),
                "a high job was reserved after a default one"
            );
        }
        let done = d.events_with("success").len();
        assert_eq!(done, order.len(), "every reserved job was settled");
    }
    assert_eq!(reserved_total, 2000);

    s.assert_state(QueueState::empty());
}
