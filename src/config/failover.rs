//! Laravel 12.34+'s `failover` queue connection: what the worker says of it.
//!
//! A `failover` connection (`queue.connections.NAME.connections`, the
//! skeleton's `[database, deferred]`) is no queue of its own: Laravel's
//! `FailoverQueue` pushes each job to the first member connection that
//! accepts it, and `queue:work failover` pops from the first member only.
//! The worker serves one connection per process, so it refuses a failover
//! connection at start and names, from the app's own list, the `work`
//! command of each member it runs and the members that are not queues.

/// One member connection of a failover connection, as the app defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverMember {
    /// The member's connection name (`database`).
    pub connection: String,
    /// Its `queue.connections.NAME.driver`; `None`: the app defines no
    /// connection of that name.
    pub driver: Option<String>,
}

/// The drivers whose jobs never reach a queue (Laravel's `sync`,
/// `deferred`, `background` and `null` connections).
const NOT_QUEUES: &[&str] = &["sync", "deferred", "background", "null"];

/// What to run for a failover connection `name`: with its `members` known
/// (the app's answer), one `laravel-worker work MEMBER` per member whose
/// driver is one of `served` (the drivers the worker runs), the members that are not queues, the queues of another driver
/// (`queue:work MEMBER`) and names the app does not define; without them
/// (read from a `.env` alone: the list is only in `config/queue.php`),
/// how to have them named.
pub fn refusal_words(name: &str, members: Option<&[FailoverMember]>, served: &[&str]) -> String {
    let how = "a failover connection pushes each job to the first of its member connections \
               that accepts it, and queue:work failover pops from the first member only";
    let Some(members) = members else {
        return format!(
            "{how}. Its members are queue.connections.{name}.connections in the app's \
             config/queue.php, which the worker reads only through PHP: give --app=/path/to/app \
             (with php on the PATH) to have them named here, or run one worker per member that \
             holds jobs, naming it (for the skeleton's [database, deferred]: laravel-worker work \
             database)"
        );
    };
    let listed: Vec<&str> = members.iter().map(|m| m.connection.as_str()).collect();
    let mut said = vec![format!(
        "{how}; this one's members (queue.connections.{name}.connections) are [{}]",
        listed.join(", ")
    )];
    let commands: Vec<String> = members
        .iter()
        .filter(|m| m.driver.as_deref().is_some_and(|d| served.contains(&d)))
        .map(|m| format!("laravel-worker work {}", m.connection))
        .collect();
    if !commands.is_empty() {
        said.push(format!(
            "run one worker per member queue, with this command's other options: {}",
            commands.join("; ")
        ));
    }
    for m in members {
        match m.driver.as_deref() {
            Some(d) if served.contains(&d) => {}
            Some(d) if NOT_QUEUES.contains(&d) => said.push(format!(
                "{} (driver {d:?}) is not a queue: its jobs run without a worker",
                m.connection
            )),
            Some(d) => said.push(format!(
                "{} (driver {d:?}) is a queue laravel-worker does not run: php artisan \
                 queue:work {} serves it",
                m.connection, m.connection
            )),
            None => said.push(format!(
                "{} is not defined in queue.connections",
                m.connection
            )),
        }
    }
    said.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drivers the worker runs.
    const SERVED: &[&str] = &["redis", "database", "sqs", "beanstalkd"];

    fn member(connection: &str, driver: Option<&str>) -> FailoverMember {
        FailoverMember {
            connection: connection.into(),
            driver: driver.map(str::to_string),
        }
    }

    #[test]
    fn the_skeleton_s_members_give_one_command_and_one_non_queue() {
        let words = refusal_words(
            "failover",
            Some(&[
                member("database", Some("database")),
                member("deferred", Some("deferred")),
            ]),
            SERVED,
        );
        assert!(words.contains("are [database, deferred]"), "{words}");
        assert!(words.contains(": laravel-worker work database;"), "{words}");
        assert!(
            words.contains("deferred (driver \"deferred\") is not a queue"),
            "{words}"
        );
    }

    #[test]
    fn every_kind_of_member_is_named() {
        let words = refusal_words(
            "fo",
            Some(&[
                member("redis", Some("redis")),
                member("sqs-eu", Some("sqs")),
                member("rabbit", Some("rabbitmq")),
                member("gone", None),
            ]),
            SERVED,
        );
        assert!(
            words.contains("laravel-worker work redis; laravel-worker work sqs-eu"),
            "{words}"
        );
        assert!(words.contains("php artisan queue:work rabbit"), "{words}");
        assert!(words.contains("gone is not defined"), "{words}");
    }

    #[test]
    fn without_the_app_s_answer_it_says_how_to_have_them_named() {
        let words = refusal_words("failover", None, SERVED);
        assert!(words.contains("--app=/path/to/app"), "{words}");
        assert!(words.contains("config/queue.php"), "{words}");
    }
}
