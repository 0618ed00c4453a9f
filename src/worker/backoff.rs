//! Retry delays (`Worker::calculateBackoff`, protocol §6.5).

/// The delay in seconds before attempt `attempt` (counted from 1) is retried:
/// entry `attempt - 1` of the job's own list (payload `backoff`, else
/// `delay`) or of `--backoff`, and the last entry past the end.
pub fn delay_for(job_backoff: Option<&[u64]>, worker_backoff: &[u64], attempt: u64) -> u64 {
    let list = job_backoff.unwrap_or(worker_backoff);
    let index = attempt.saturating_sub(1) as usize;
    list.get(index).or(list.last()).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_by_attempt_and_repeats_the_last() {
        let job = [1, 5, 30];
        let delays: Vec<u64> = (1..=5).map(|a| delay_for(Some(&job), &[0], a)).collect();
        assert_eq!(delays, [1, 5, 30, 30, 30]);
        assert_eq!(delay_for(None, &[7], 3), 7);
        assert_eq!(delay_for(None, &[], 1), 0);
    }
}
