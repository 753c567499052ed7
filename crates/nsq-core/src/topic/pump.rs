//! The topic's pump: the task that drains the topic's backlog (memory queue, then
//! diskqueue) into its channels once there is somewhere to send it, and the fan-out of a
//! batch to the channels (shared with a publish's direct path).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::state::{Batch, Pump};
use super::Topic;
use crate::backend::{BackendError, RecordPos};
use crate::channel::Channel;
use crate::message::Message;
use crate::receipt::PutReceipt;

/// How long the pump waits before retrying a channel that refused a batch.
const PUMP_RETRY: Duration = Duration::from_millis(250);

/// What one pump step did.
enum PumpStep {
    /// Nothing to do (or nowhere to send it): `pumping` was cleared.
    Stop,
    /// A batch reached every channel; `receipt` holds the writes to wait for (durable mode).
    Moved(PutReceipt),
    /// A channel refused the batch; it is kept for a retry.
    Stalled,
}

impl Topic {
    /// Starts the pump if there is a backlog (or a stalled batch) and somewhere to send it.
    pub(super) fn ensure_pump(self: &Arc<Self>) {
        let start = {
            let mut st = self.state.lock();
            let gate = self.gate(&st);
            st.queue.start_pump(gate)
        };
        if start {
            tokio::spawn(self.clone().pump());
        }
    }

    async fn pump(self: Arc<Self>) {
        loop {
            match self.pump_batch() {
                PumpStep::Stop => return,
                PumpStep::Moved(receipt) => {
                    // Durable mode: the batch must be on disk in every channel before the
                    // topic's read watermark may pass it.
                    match receipt.durable().await {
                        Ok(()) => self.backend.set_read_watermark(None),
                        Err(e) => {
                            tracing::error!(topic = %self.name, "failed to sync messages moved to channels - {e}");
                            tokio::time::sleep(PUMP_RETRY).await;
                        }
                    }
                    tokio::task::yield_now().await;
                }
                PumpStep::Stalled => tokio::time::sleep(PUMP_RETRY).await,
            }
        }
    }

    /// One pump step (see [`TopicState::pump`]) and its effects.
    fn pump_batch(&self) -> PumpStep {
        let _guard = self.pump_lock.read();
        let step = {
            let mut st = self.state.lock();
            let gate = self.gate(&st);
            let fanout = st.fanout.clone();
            st.queue.pump(gate, &fanout)
        };
        let step = match step {
            Pump::Read(max) => {
                let mut raw: Vec<(Bytes, RecordPos)> = Vec::with_capacity(max);
                let got = self.backend.read_batch_pos(max, &mut raw);
                if let Some((_, first)) = raw.first() {
                    // Until the batch is in every channel, a crash re-reads from it on (the
                    // backend set this already when none was set; this also moves it past a
                    // batch whose sync failed).
                    self.backend.set_read_watermark(Some(*first));
                }
                let mut msgs = Vec::with_capacity(raw.len());
                for (payload, _) in raw {
                    match Message::decode(payload) {
                        Ok(m) => msgs.push(m),
                        Err(e) => {
                            tracing::error!(topic = %self.name, "failed to decode message - {e}")
                        }
                    }
                }
                let mut st = self.state.lock();
                let empty = got == 0 && self.backend.depth() <= 0;
                let fanout = st.fanout.clone();
                st.queue.pump_read(msgs, got, empty, &fanout)
            }
            other => other,
        };
        match step {
            Pump::Stop => PumpStep::Stop,
            Pump::Again => PumpStep::Moved(PutReceipt::default()),
            Pump::Deliver(b) => self.deliver(b),
            Pump::Read(_) => unreachable!("a read is reported before the next step"),
        }
    }

    /// Hands a batch to the channels still to get it; keeps it for a retry if one refuses.
    fn deliver(&self, b: Batch<Arc<Channel>>) -> PumpStep {
        if let Some(r) = &self.repl {
            // Before the channels have them: a FIN can only follow.
            r.fanout(&self.name, &b.todo, &b.msgs);
        }
        let mut receipt = PutReceipt::default();
        let failed = fan_out(&b.todo, &b.msgs, &mut receipt);
        let refused = failed.into_iter().map(|(c, _)| c).collect();
        if self.state.lock().queue.delivered(b.msgs, refused) {
            PumpStep::Stalled
        } else {
            PumpStep::Moved(receipt)
        }
    }
}

/// Hands a batch to every channel; returns the channels that refused it, with why. A channel
/// that is being deleted counts as served.
fn fan_out(
    chans: &[Arc<Channel>],
    msgs: &[Message],
    receipt: &mut PutReceipt,
) -> Vec<(Arc<Channel>, BackendError)> {
    let mut failed = Vec::new();
    for ch in chans {
        channel_result(ch, ch.receive(msgs, receipt), &mut failed);
    }
    failed
}

/// [`fan_out`] for a batch nobody needs afterwards: the last channel keeps the messages
/// instead of cloning them (nsqd/topic.go `messagePump` likewise gives one channel, the first,
/// the original message and the others copies).
pub(super) fn fan_out_owned(
    chans: &[Arc<Channel>],
    msgs: Vec<Message>,
    receipt: &mut PutReceipt,
) -> Vec<(Arc<Channel>, BackendError)> {
    let mut failed = Vec::new();
    let Some((last, rest)) = chans.split_last() else {
        return failed;
    };
    for ch in rest {
        channel_result(ch, ch.receive(&msgs, receipt), &mut failed);
    }
    channel_result(last, last.receive_owned(msgs, receipt), &mut failed);
    failed
}

fn channel_result(
    ch: &Arc<Channel>,
    r: Result<(), BackendError>,
    failed: &mut Vec<(Arc<Channel>, BackendError)>,
) {
    match r {
        Ok(()) => {}
        Err(BackendError::Exiting) if ch.is_exiting() => {}
        Err(e) => {
            tracing::error!(topic = %ch.topic_name(), channel = %ch.name(), "failed to put message to channel - {e}");
            failed.push((ch.clone(), e));
        }
    }
}
