//! The scheduling policy of handler processes (`[[handlers]] scheduling`):
//! set by the worker before the handler starts, inherited by what the
//! handler runs. Real daemon, real Redis, real processes; the policy is read
//! from `/proc/<pid>/stat` (field 41) by a child of each handler.

use crate::common;

use common::{Handler, Job, QueueState, Scene};

/// `/proc/<pid>/stat`'s `policy` field for SCHED_OTHER, SCHED_BATCH and
/// SCHED_IDLE.
const OTHER: &str = "0";
const BATCH: &str = "3";
const IDLE: &str = "5";

/// Process and persistent handlers, each on its own queue, record the policy
/// of a child of theirs (`cut`, reading its own stat) in `policy.QUEUE`:
/// batch when `scheduling` is not set, and what it names when it is.
#[test]
fn handlers_run_under_the_policy_their_entry_names() {
    let s = Scene::new();
    let policy_of_a_child = "cut -d' ' -f41 /proc/self/stat";
    let process = s.script(
        "process.sh",
        &format!("{policy_of_a_child} > \"$DIR/policy.$LARAVEL_WORKER_QUEUE\""),
    );
    // A persistent handler is told its queue by its first argument.
    let persistent = s.script(
        "persistent.sh",
        &format!(
            "while IFS= read -r line; do\n  \
             {policy_of_a_child} > \"$DIR/policy.$1\"\n  \
             call=${{line#{{\\\"call\\\":}}; echo \"{{\\\"call\\\":${{call%%,*}},\\\"action\\\":\\\"done\\\"}}\" >&3\n\
             done"
        ),
    );
    let persistent = |queue: &str| Handler::argv(&[persistent.to_str().unwrap(), queue]);
    let config = s
        .config()
        .handler(Handler::command(&process).queues(&["unset"]))
        .handler(
            Handler::command(&process)
                .queues(&["other"])
                .scheduling("other"),
        )
        .handler(
            Handler::command(&process)
                .queues(&["idle"])
                .scheduling("idle"),
        )
        .handler(
            persistent("warm-unset")
                .queues(&["warm-unset"])
                .persistent(),
        )
        .handler(
            persistent("warm-other")
                .queues(&["warm-other"])
                .persistent()
                .scheduling("other"),
        )
        .write();
    let queues = ["unset", "other", "idle", "warm-unset", "warm-other"];
    for queue in queues {
        s.push_on(queue, [&Job::laravel8("App\\Jobs\\Policy")]);
    }
    let mut d = s.work(
        &config,
        &[
            &format!("--queue={}", queues.join(",")),
            "--stop-when-empty",
            "--sleep=0",
        ],
    );
    d.expect_exit(0);
    s.assert_state(QueueState::empty());
    for (queue, expected) in [
        ("unset", BATCH),
        ("other", OTHER),
        ("idle", IDLE),
        ("warm-unset", BATCH),
        ("warm-other", OTHER),
    ] {
        let path = s.path(&format!("policy.{queue}"));
        let policy = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{queue}: {} was not written: {e}", path.display()));
        assert_eq!(policy.trim(), expected, "{queue}: the handler's policy");
    }
}
