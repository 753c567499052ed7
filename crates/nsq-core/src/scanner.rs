//! The queue scanner: the reference's probabilistic loop that times out in-flight messages and
//! releases due deferred ones across all channels.
//!
//! Every `interval` pick up to `selection_count` random channels, process them on a worker
//! pool (`clamp(channels / 4, 1, worker_pool_max)` tasks) — timeouts, due deferrals, then the
//! settlements waiting for a sync (`Channel::settle_durable`) — and loop again at once while
//! more than `dirty_percent` of them had work. The channel list is refreshed every
//! `refresh_interval`, and at once when channels were created or deleted since the last look.

use std::sync::Arc;

use rand::seq::index::sample;
use tokio::sync::{mpsc, Mutex, Notify};
use tokio::task::JoinHandle;
use tokio::time::{interval, Instant, MissedTickBehavior};

use crate::channel::Channel;
use crate::engine::Engine;
use crate::options::ScanOptions;

/// A running scanner; [`ScannerHandle::stop`] ends it and its workers.
pub struct ScannerHandle {
    stop: Arc<Notify>,
    join: JoinHandle<()>,
}

impl ScannerHandle {
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.join.await;
    }
}

/// Starts the scanner on the current Tokio runtime.
pub fn spawn(engine: Arc<Engine>, opts: ScanOptions) -> ScannerHandle {
    let stop = Arc::new(Notify::new());
    let join = tokio::spawn(run(engine, opts, stop.clone()));
    ScannerHandle { stop, join }
}

/// Processes one channel at the current time: timeouts and due deferrals. True if dirty.
pub fn scan_channel(ch: &Channel) -> bool {
    let now = Instant::now();
    let a = ch.process_in_flight(now);
    let b = ch.process_deferred(now);
    a || b
}

struct Pool {
    work_tx: mpsc::Sender<Option<Arc<Channel>>>,
    work_rx: Arc<Mutex<mpsc::Receiver<Option<Arc<Channel>>>>>,
    done_tx: mpsc::Sender<bool>,
    workers: usize,
}

impl Pool {
    fn resize(&mut self, channels: usize, max: usize) {
        let want = (channels / 4).clamp(1, max.max(1));
        while self.workers < want {
            let rx = self.work_rx.clone();
            let done = self.done_tx.clone();
            tokio::spawn(async move {
                loop {
                    let job = rx.lock().await.recv().await;
                    match job {
                        Some(Some(ch)) => {
                            let dirty = scan_channel(&ch);
                            // Settlements waiting for a sync (requeued and deferred messages'
                            // old records): not dirty work, it never repeats at once.
                            ch.settle_durable().await;
                            if done.send(dirty).await.is_err() {
                                return;
                            }
                        }
                        Some(None) | None => return,
                    }
                }
            });
            self.workers += 1;
        }
        while self.workers > want {
            // A `None` job retires one worker.
            if self.work_tx.try_send(None).is_err() {
                break;
            }
            self.workers -= 1;
        }
    }
}

async fn run(engine: Arc<Engine>, opts: ScanOptions, stop: Arc<Notify>) {
    let (work_tx, work_rx) = mpsc::channel(opts.selection_count.max(1));
    let (done_tx, mut done_rx) = mpsc::channel(opts.selection_count.max(1));
    let mut pool = Pool {
        work_tx,
        work_rx: Arc::new(Mutex::new(work_rx)),
        done_tx,
        workers: 0,
    };

    let mut generation = engine.channels_generation();
    let mut channels = engine.channels();
    pool.resize(channels.len(), opts.worker_pool_max);
    let mut work_tick = interval(opts.interval);
    work_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut refresh_tick = interval(opts.refresh_interval);
    refresh_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    refresh_tick.reset();

    loop {
        tokio::select! {
            _ = stop.notified() => break,
            _ = refresh_tick.tick() => {
                generation = engine.channels_generation();
                channels = engine.channels();
                pool.resize(channels.len(), opts.worker_pool_max);
                continue;
            }
            _ = work_tick.tick() => {
                // Unlike the reference (which waits for the next refresh), pick up new
                // channels at once so their timeouts are not late by up to 5 s.
                let g = engine.channels_generation();
                if g != generation {
                    generation = g;
                    channels = engine.channels();
                    pool.resize(channels.len(), opts.worker_pool_max);
                }
            }
        }
        if channels.is_empty() {
            continue;
        }
        loop {
            let n = opts.selection_count.min(channels.len()).max(1);
            let picks: Vec<usize> = sample(&mut rand::thread_rng(), channels.len(), n).into_vec();
            for i in picks {
                if pool.work_tx.send(Some(channels[i].clone())).await.is_err() {
                    return;
                }
            }
            let mut dirty = 0;
            for _ in 0..n {
                match done_rx.recv().await {
                    Some(true) => dirty += 1,
                    Some(false) => {}
                    None => return,
                }
            }
            if (dirty as f64) / (n as f64) <= opts.dirty_percent {
                break;
            }
        }
    }
    for _ in 0..pool.workers {
        let _ = pool.work_tx.send(None).await;
    }
}
