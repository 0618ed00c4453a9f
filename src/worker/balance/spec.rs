//! The balance settings as written (`[worker]` keys, `work`'s flags), and
//! their check against the queues of `--queue` into a [`Policy`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::share::{Bounds, Mode, Policy, SHRINK_ROUNDS, Strategy};
use crate::worker::options::MAX_PROCESSES;

/// Horizon's default `balanceCooldown`, in seconds.
pub const DEFAULT_COOLDOWN: u64 = 3;

/// Horizon's default `balanceMaxShift`.
pub const DEFAULT_MAX_SHIFT: usize = 1;

/// Horizon's default `minProcesses`.
pub const DEFAULT_MIN_PROCESSES: usize = 1;

/// One queue's own limits (`[worker.queues.NAME]`); unset: the group's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// Slots the queue always keeps.
    pub min_processes: Option<usize>,
    /// Slots the queue never exceeds.
    pub max_processes: Option<usize>,
}

/// `[worker] balance` and its companions; every field unset means the
/// default (or, for `max_processes`, `--concurrency`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BalanceSettings {
    /// `balance`: `off` (default), `simple` or `auto`.
    pub mode: Option<Mode>,
    /// `auto_scaling_strategy`: `time` (default) or `size`.
    pub strategy: Option<Strategy>,
    /// `min_processes`: every queue's minimum (default 1).
    pub min_processes: Option<usize>,
    /// `max_processes`: slots in all (default `--concurrency`).
    pub max_processes: Option<usize>,
    /// `balance_max_shift`: slots a queue gains or loses per round (default 1).
    pub max_shift: Option<usize>,
    /// `balance_cooldown`: seconds between rounds (default 3).
    pub cooldown: Option<u64>,
    /// `[worker.queues.NAME]`: a queue's own limits.
    pub queues: BTreeMap<String, QueueLimits>,
}

impl BalanceSettings {
    /// These settings with every field `over` sets taken from it.
    pub fn overridden_by(self, over: BalanceSettings) -> BalanceSettings {
        let mut queues = self.queues;
        queues.extend(over.queues);
        BalanceSettings {
            mode: over.mode.or(self.mode),
            strategy: over.strategy.or(self.strategy),
            min_processes: over.min_processes.or(self.min_processes),
            max_processes: over.max_processes.or(self.max_processes),
            max_shift: over.max_shift.or(self.max_shift),
            cooldown: over.cooldown.or(self.cooldown),
            queues,
        }
    }

    /// The policy for `queues` (`--queue`, priority order) with
    /// `concurrency` as the default total; `None` when balance is off.
    ///
    /// # Errors
    /// A queue listed twice, a `[worker.queues.NAME]` for a queue not in
    /// the list, a maximum below its minimum, minimums that add up to more
    /// than `max_processes` (Horizon would go below them), a zero
    /// `max_processes`, `balance_max_shift` or `balance_cooldown`, a count
    /// above [`MAX_PROCESSES`] (`--concurrency`'s bound: Horizon sets none,
    /// but 10^9 slots would fill memory before any job ran).
    pub fn resolve(&self, queues: &[String], concurrency: usize) -> anyhow::Result<Option<Policy>> {
        let mode = self.mode.unwrap_or(Mode::Off);
        if mode == Mode::Off {
            return Ok(None);
        }
        let total = self.max_processes.unwrap_or(concurrency);
        anyhow::ensure!(
            (1..=MAX_PROCESSES).contains(&total),
            "[worker] max_processes = {total}: expected 1 to {MAX_PROCESSES} (as --concurrency)"
        );
        if let Some(min) = self.min_processes.filter(|&min| min > MAX_PROCESSES) {
            anyhow::bail!("[worker] min_processes = {min}: at most {MAX_PROCESSES}");
        }
        let max_shift = self.max_shift.unwrap_or(DEFAULT_MAX_SHIFT);
        anyhow::ensure!(
            (1..=MAX_PROCESSES).contains(&max_shift),
            "[worker] balance_max_shift = {max_shift}: expected 1 to {MAX_PROCESSES}"
        );
        let cooldown = self.cooldown.unwrap_or(DEFAULT_COOLDOWN);
        anyhow::ensure!(
            (1..=crate::worker::options::MAX_SECONDS).contains(&cooldown),
            "[worker] balance_cooldown must be a number of seconds from 1 to {}",
            crate::worker::options::MAX_SECONDS
        );
        let bounds = self.bounds(queues, total)?;
        let mins = bounds
            .iter()
            .fold(0usize, |sum, b| sum.saturating_add(b.min));
        anyhow::ensure!(
            mins <= total,
            "[worker] balance: the queues' min_processes add up to {mins}, more than \
             max_processes = {total} (the slots in all); raise max_processes (or \
             --concurrency) or lower min_processes"
        );
        Ok(Some(Policy {
            mode,
            strategy: self.strategy.unwrap_or(Strategy::Time),
            total,
            bounds,
            max_shift,
            cooldown: Duration::from_secs(cooldown),
            shrink_rounds: SHRINK_ROUNDS,
        }))
    }

    /// Each queue's bounds: its own limits, else the group's.
    fn bounds(&self, queues: &[String], total: usize) -> anyhow::Result<Vec<Bounds>> {
        for (i, name) in queues.iter().enumerate() {
            anyhow::ensure!(
                !queues[..i].contains(name),
                "[worker] balance: queue {name:?} is listed twice in --queue"
            );
        }
        if let Some(name) = self.queues.keys().find(|name| !queues.contains(name)) {
            anyhow::bail!(
                "[worker.queues.{name}]: {name:?} is not one of the queues worked ({})",
                queues.join(",")
            );
        }
        let group_min = self.min_processes.unwrap_or(DEFAULT_MIN_PROCESSES);
        queues
            .iter()
            .map(|name| {
                let own = self.queues.get(name).cloned().unwrap_or_default();
                let min = own.min_processes.unwrap_or(group_min);
                let max = own.max_processes.unwrap_or(total).min(total);
                anyhow::ensure!(
                    max >= min && max > 0,
                    "[worker] balance: queue {name:?} may have at most {max} slots, \
                     fewer than its min_processes = {min} (or none at all)"
                );
                Ok(Bounds { min, max })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn off_by_default_and_horizons_defaults_when_on() {
        let none = BalanceSettings::default();
        assert_eq!(none.resolve(&names(&["a"]), 4).unwrap(), None);
        let auto = BalanceSettings {
            mode: Some(Mode::Auto),
            ..Default::default()
        };
        let p = auto.resolve(&names(&["a", "b"]), 4).unwrap().unwrap();
        assert_eq!(p.total, 4, "--concurrency is the default total");
        assert_eq!(p.bounds, [Bounds { min: 1, max: 4 }; 2]);
        assert_eq!((p.max_shift, p.cooldown), (1, Duration::from_secs(3)));
        assert_eq!(p.strategy, Strategy::Time);
    }

    #[test]
    fn a_queues_own_limits_win_and_impossible_ones_are_refused() {
        let mut s = BalanceSettings {
            mode: Some(Mode::Auto),
            max_processes: Some(6),
            min_processes: Some(2),
            ..Default::default()
        };
        s.queues.insert(
            "low".into(),
            QueueLimits {
                min_processes: Some(0),
                max_processes: Some(2),
            },
        );
        let p = s.resolve(&names(&["high", "low"]), 1).unwrap().unwrap();
        assert_eq!(
            p.bounds,
            [Bounds { min: 2, max: 6 }, Bounds { min: 0, max: 2 }]
        );
        let e = s
            .resolve(&names(&["a", "b", "c", "d", "low"]), 1)
            .unwrap_err();
        assert!(e.to_string().contains("add up to 8"), "{e}");
        let e = s.resolve(&names(&["high"]), 1).unwrap_err();
        assert!(e.to_string().contains("[worker.queues.low]"), "{e}");
        let e = s.resolve(&names(&["high", "high", "low"]), 1).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        s.queues.get_mut("low").unwrap().min_processes = Some(3);
        assert!(s.resolve(&names(&["high", "low"]), 1).is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let file = BalanceSettings {
            mode: Some(Mode::Simple),
            cooldown: Some(5),
            ..Default::default()
        };
        let flags = BalanceSettings {
            mode: Some(Mode::Auto),
            ..Default::default()
        };
        let both = file.overridden_by(flags);
        assert_eq!((both.mode, both.cooldown), (Some(Mode::Auto), Some(5)));
    }
}
