//! `data.command` as plain JSON for handlers that are not PHP: a file named
//! by `LARAVEL_WORKER_COMMAND_FILE` for one-process-per-job handlers, a
//! `command` field in persistent requests.

use crate::common;

use common::{Handler, Job, QueueState, Scene};
use serde_json::{Value, json};

/// `serialize(new App\Jobs\SendEmail)` as PHP 8.2 writes it: a protected
/// model identifier, a private array, a null and a mixed array.
const COMMAND: &str = "O:18:\"App\\Jobs\\SendEmail\":4:{s:7:\"\0*\0user\";O:45:\"Illuminate\\Contracts\\Database\\ModelIdentifier\":2:{s:5:\"class\";s:8:\"App\\User\";s:2:\"id\";i:7;}s:24:\"\0App\\Jobs\\SendEmail\0tags\";a:2:{i:0;s:1:\"a\";i:1;s:3:\"bé\";}s:5:\"delay\";N;s:4:\"opts\";a:2:{s:1:\"x\";d:1.5;s:1:\"y\";b:1;}}";

fn expected() -> Value {
    json!({
        "__class": "App\\Jobs\\SendEmail",
        "user": {"__class": "Illuminate\\Contracts\\Database\\ModelIdentifier", "class": "App\\User", "id": 7},
        "tags": ["a", "bé"],
        "delay": null,
        "opts": {"x": 1.5, "y": true}
    })
}

fn job_with(command: &str) -> Job {
    Job::laravel8("App\\Jobs\\SendEmail").set(
        "data",
        json!({"commandName": "App\\Jobs\\SendEmail", "command": command}),
    )
}

#[test]
fn subprocess_handlers_get_the_command_as_a_json_file() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "n=$(cat \"$DIR/n\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$DIR/n\"\n\
         if [ -n \"$LARAVEL_WORKER_COMMAND_FILE\" ]; then cp \"$LARAVEL_WORKER_COMMAND_FILE\" \"$DIR/command.$n.json\"; echo \"$LARAVEL_WORKER_COMMAND_FILE\" > \"$DIR/path.$n\"; fi",
    );
    let config = s.config_for(&handler);
    let encrypted = job_with("eyJpdiI6IjEyMyIsInZhbHVlIjoiIn0=");
    s.push_on("default", [&job_with(COMMAND), &encrypted]);
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);

    let decoded: Value = serde_json::from_str(&s.read("command.1.json")).unwrap();
    assert_eq!(decoded, expected(), "the command as JSON");
    let path = s.read("path.1");
    assert!(
        !std::path::Path::new(path.trim()).exists(),
        "{path} removed after the call"
    );
    assert!(
        !s.path("command.2.json").exists(),
        "an encrypted command is not decoded"
    );
    assert_eq!(s.read("n"), "2", "handler calls");
}

#[test]
fn persistent_requests_carry_the_command() {
    let s = Scene::new();
    let log_requests = "while IFS= read -r line; do printf '%s\\n' \"$line\" >> \"$LOG\"; \
         call=${line#{\\\"call\\\":}; echo \"{\\\"call\\\":${call%%,*},\\\"action\\\":\\\"done\\\"}\" >&3; done";
    let config = s.config().script(log_requests).tune(Handler::persistent);
    let config = config.write();
    s.push(&job_with(COMMAND));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    let request: Value = serde_json::from_str(&s.log()[0]).unwrap();
    assert_eq!(request["command"], expected(), "the command as JSON");
    // The answer was taken: the job is gone.
    s.assert_redis(QueueState::empty());
}
