//! Runs of one backend at once: a fair (first come, first served) semaphore per backend. A run
//! that has to wait says so with a `processing` event naming how many runs are ahead of it.

use elfgate_core::CliBackend;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The slots of one backend.
#[derive(Debug)]
struct Slots {
    max: usize,
    sem: Arc<Semaphore>,
    /// Runs waiting for a slot.
    waiting: AtomicUsize,
}

/// Every backend's slots.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    slots: BTreeMap<CliBackend, Slots>,
}

/// Whether a run got a slot at once, or had to wait behind `ahead` runs first.
pub(crate) enum Slot {
    /// It may run.
    Granted(OwnedSemaphorePermit),
    /// The run was interrupted while it waited.
    Cancelled,
}

impl Limits {
    /// `max[b]` runs of backend `b` at once (at least one).
    pub(crate) fn new(max: impl Fn(CliBackend) -> usize) -> Limits {
        let slots = CliBackend::ALL
            .iter()
            .map(|&b| {
                let max = max(b).max(1);
                let slots = Slots {
                    max,
                    sem: Arc::new(Semaphore::new(max)),
                    waiting: AtomicUsize::new(0),
                };
                (b, slots)
            })
            .collect();
        Limits { slots }
    }

    /// The most runs of `b` at once.
    pub(crate) fn max(&self, b: CliBackend) -> usize {
        self.slots.get(&b).map_or(1, |s| s.max)
    }

    /// A slot for a run of `b`: at once if one is free, else after `queued(ahead)` has been
    /// called with the number of runs ahead (running and waiting), in arrival order.
    pub(crate) async fn acquire(
        &self,
        b: CliBackend,
        cancel: &CancellationToken,
        queued: impl AsyncFnOnce(usize),
    ) -> Slot {
        let Some(slots) = self.slots.get(&b) else {
            return Slot::Cancelled;
        };
        if let Ok(p) = slots.sem.clone().try_acquire_owned() {
            return Slot::Granted(p);
        }
        let running = slots.max - slots.sem.available_permits().min(slots.max);
        let ahead = running + slots.waiting.fetch_add(1, Ordering::SeqCst);
        queued(ahead).await;
        let got = tokio::select! {
            biased;
            _ = cancel.cancelled() => Slot::Cancelled,
            p = slots.sem.clone().acquire_owned() => match p {
                Ok(p) => Slot::Granted(p),
                Err(_) => Slot::Cancelled,
            },
        };
        slots.waiting.fetch_sub(1, Ordering::SeqCst);
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_run_waits_behind_the_first_and_gets_its_slot_when_it_ends() {
        let limits = Arc::new(Limits::new(|_| 1));
        let cancel = CancellationToken::new();
        let Slot::Granted(first) = limits
            .acquire(CliBackend::Codex, &cancel, async |_| {})
            .await
        else {
            panic!("the first run waited");
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let l = limits.clone();
        let c = cancel.clone();
        let second = tokio::spawn(async move {
            let slot = l
                .acquire(CliBackend::Codex, &c, async |ahead| {
                    let _ = tx.send(ahead);
                })
                .await;
            matches!(slot, Slot::Granted(_))
        });
        assert_eq!(rx.await.unwrap(), 1);
        // Another backend is not held up.
        assert!(matches!(
            limits
                .acquire(CliBackend::GeminiCli, &cancel, async |_| {})
                .await,
            Slot::Granted(_)
        ));
        drop(first);
        assert!(second.await.unwrap());
    }

    #[tokio::test]
    async fn an_interrupt_ends_the_wait() {
        let limits = Limits::new(|_| 1);
        let cancel = CancellationToken::new();
        let _first = limits
            .acquire(CliBackend::Codex, &cancel, async |_| {})
            .await;
        let stop = CancellationToken::new();
        let slot = limits
            .acquire(CliBackend::Codex, &stop, async |_| stop.cancel())
            .await;
        assert!(matches!(slot, Slot::Cancelled));
    }
}
