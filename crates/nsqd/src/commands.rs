//! The V2 commands once decoded (nsqd/protocol_v2.go, `Exec` and one function per command):
//! the per-command state checks the decoder runs first ([`Gate`]), [`exec`], which runs one
//! command and returns what to answer, and the batch in which the reader finishes
//! consecutive FINs ([`Fins`]). No socket here: the reader (`protocol_v2.rs`, `read_loop`)
//! queues the answer for the writer, and performs the IDENTIFY upgrades exec asks for.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use nsq_core::{FinishError, PutReceipt, SubscribeError};
use nsq_protocol::command::{clamp_req_timeout, Command, CommandKind, DecodeHooks, Verdict};
use nsq_protocol::error::NsqError;
use nsq_protocol::frame;
use nsq_protocol::identify::{negotiate, parse_identify, IdentifyResponse, Negotiated};
use nsq_protocol::names::is_ephemeral;
use nsq_protocol::MessageId;

use crate::client::{Client, ConnState};
use crate::nsqd::Nsqd;

/// What a command that succeeded answers.
pub(crate) enum Reply {
    /// Nothing (FIN, REQ, RDY, TOUCH, NOP).
    Nothing,
    /// A response frame with this data (`OK`, `CLOSE_WAIT`, AUTH's and IDENTIFY's JSON).
    Response(Cow<'static, [u8]>),
    /// IDENTIFY's response, then the negotiated upgrades (TLS, snappy, deflate), which the
    /// reader performs once the response is queued.
    Upgrade(Vec<u8>, Negotiated),
    /// A publish stored in command order whose acknowledgement (durable, replicated) was not
    /// ready at once: the reader keeps it in its FIFO of pending answers and goes on reading
    /// (`protocol_v2.rs`, `Reader::pending`); it resolves to the publish's answer.
    Wait(AckWait),
}

/// The rest of a publish once stored: its durable and replicated waits, then its answer.
pub(crate) type AckWait = Pin<Box<dyn Future<Output = Result<Reply, NsqError>> + Send>>;

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Nothing => f.write_str("Nothing"),
            Reply::Response(d) => f.debug_tuple("Response").field(d).finish(),
            Reply::Upgrade(d, n) => f.debug_tuple("Upgrade").field(d).field(n).finish(),
            Reply::Wait(_) => f.write_str("Wait"),
        }
    }
}

impl Reply {
    fn ok() -> Reply {
        Reply::Response(Cow::Borrowed(frame::OK))
    }
}

/// The per-command state checks of the reference, run by the decoder before any parameter
/// validation.
pub(crate) struct Gate<'a> {
    nsqd: &'a Nsqd,
    client: &'a Client,
    /// The topic of an MPUB whose body is still being read: the reference creates the topic
    /// before reading the body, so a body error must still leave the topic created.
    mpub_topic: Option<String>,
}

impl<'a> Gate<'a> {
    pub(crate) fn new(nsqd: &'a Nsqd, client: &'a Client) -> Self {
        Gate {
            nsqd,
            client,
            mpub_topic: None,
        }
    }

    /// A command was decoded in full: no MPUB body is pending any more.
    pub(crate) fn command_done(&mut self) {
        self.mpub_topic = None;
    }

    /// The command being read turned out bad or was cut short: an MPUB's topic is created
    /// all the same, as the reference does.
    pub(crate) async fn create_pending_topic(&mut self) {
        if let Some(topic) = self.mpub_topic.take() {
            let _ = self.nsqd.topic(&topic).await;
        }
    }
}

impl DecodeHooks for Gate<'_> {
    fn gate(&mut self, raw_name: &[u8], kind: Option<CommandKind>) -> Result<Verdict, NsqError> {
        if self.nsqd.tcp.tls_required
            && kind != Some(CommandKind::Identify)
            && !self.client.record.lock().meta.tls
        {
            return Err(NsqError::tls_required(raw_name));
        }
        let state = self.client.state();
        let Some(kind) = kind else {
            return Ok(Verdict::Proceed);
        };
        let ok = match kind {
            CommandKind::Identify | CommandKind::Auth => state == ConnState::Init,
            CommandKind::Sub => {
                if state != ConnState::Init {
                    false
                } else if self.client.settings.lock().heartbeat.is_none() {
                    return Err(NsqError::sub_heartbeats_disabled());
                } else {
                    true
                }
            }
            CommandKind::Rdy => {
                if state == ConnState::Closing {
                    return Ok(Verdict::Ignore);
                }
                state == ConnState::Subscribed
            }
            CommandKind::Fin | CommandKind::Req | CommandKind::Touch => {
                state == ConnState::Subscribed || state == ConnState::Closing
            }
            CommandKind::Cls => state == ConnState::Subscribed,
            CommandKind::Pub | CommandKind::Mpub | CommandKind::Dpub | CommandKind::Nop => true,
        };
        if ok {
            Ok(Verdict::Proceed)
        } else {
            Err(NsqError::cannot_in_current_state(kind.name()))
        }
    }

    fn mpub_topic(&mut self, topic: &str) -> Result<(), NsqError> {
        // Created (with lookupd channel pre-creation, which is async) by exec, or by
        // `create_pending_topic` if the body turns out bad.
        self.mpub_topic = Some(topic.to_string());
        Ok(())
    }
}

/// FINs waiting to be applied as one batch: the reader collects the consecutive FINs of one
/// read and finishes them under one channel lock round. Any other command flushes them first,
/// so answers keep their order.
#[derive(Default)]
pub(crate) struct Fins {
    ids: Vec<MessageId>,
    failed: Vec<(MessageId, FinishError)>,
}

impl Fins {
    pub(crate) fn push(&mut self, id: MessageId) {
        self.ids.push(id);
    }

    /// Finishes the pending FINs with one channel lock round and queues the `E_FIN_FAILED`
    /// errors in order. Returns whether any FIN was applied (window space freed).
    pub(crate) fn flush(&mut self, client: &Client) -> bool {
        if self.ids.is_empty() {
            return false;
        }
        let ch = client.channel.get().expect("FIN allowed only after SUB");
        let n = ch.finish_many(client.id, &self.ids, &mut self.failed);
        client.finished(n);
        for (id, e) in self.failed.drain(..) {
            send_error(client, &NsqError::fin_failed(&id, &e.to_string()));
        }
        self.ids.clear();
        n > 0
    }
}

/// The auth check of SUB/PUB/MPUB/DPUB (nsqd/protocol_v2.go, `CheckAuth`), refreshing an expired authorization.
async fn check_auth(
    nsqd: &Nsqd,
    client: &Client,
    cmd: &str,
    topic: &str,
    channel: &str,
) -> Result<(), NsqError> {
    if !nsqd.tcp.auth_required {
        return Ok(());
    }
    let current = client.record.lock().auth.clone();
    let Some((mut state, secret)) = current else {
        return Err(NsqError::auth_first(cmd));
    };
    if state.is_expired() {
        // Boxed: the HTTP request's future is large and rare; inline it would size every
        // connection's reader task (see `exec`).
        state = Box::pin(query_auth(nsqd, client, &secret))
            .await
            .map_err(|e| {
                tracing::warn!("client({}): auth refresh failed - {e}", client.remote_addr);
                NsqError::auth_failed()
            })?;
        client.record.lock().auth = Some((state.clone(), secret));
    }
    if state.allows(topic, channel, cmd == "SUB") {
        Ok(())
    } else {
        Err(NsqError::unauthorized(cmd, topic, channel))
    }
}

async fn query_auth(
    nsqd: &Nsqd,
    client: &Client,
    secret: &[u8],
) -> Result<crate::auth::AuthState, crate::auth::AuthError> {
    let (tls, cn) = {
        let r = client.record.lock();
        (r.meta.tls, r.meta.tls_common_name.clone())
    };
    crate::auth::query(
        &nsqd.http_client,
        &nsqd.opts.auth_http_addresses,
        secret,
        &client.remote_addr.ip().to_string(),
        tls,
        &cn,
    )
    .await
}

/// AUTH (nsqd/protocol_v2.go, `AUTH`).
async fn auth(nsqd: &Nsqd, client: &Client, secret: Bytes) -> Result<Reply, NsqError> {
    if client.record.lock().auth.is_some() {
        return Err(NsqError::auth_already_set());
    }
    if !nsqd.tcp.auth_required {
        return Err(NsqError::auth_disabled());
    }
    let state = Box::pin(query_auth(nsqd, client, &secret))
        .await
        .map_err(|e| {
            tracing::warn!("client({}): auth failed - {e}", client.remote_addr);
            NsqError::auth_failed()
        })?;
    if state.permission_count() == 0 {
        return Err(NsqError::auth_no_authorizations());
    }
    let body = state.response_json();
    let mut r = client.record.lock();
    r.meta.authed = true;
    r.meta.auth_identity = state.identity.clone();
    r.meta.auth_identity_url = state.identity_url.clone();
    r.auth = Some((state, secret));
    Ok(Reply::Response(body.into()))
}

/// Queues an error frame for the writer.
pub(crate) fn send_error(client: &Client, e: &NsqError) {
    let data = e.to_frame_data();
    client.send_frame(|b| frame::put_error(b, &data));
}

/// Queues a response frame for the writer.
pub(crate) fn send_response(client: &Client, data: &[u8]) {
    client.send_frame(|b| frame::put_response(b, data));
}

/// Runs one decoded command and says what to answer. `Err` is the error frame to send (fatal
/// or not, per its code).
pub(crate) async fn exec(
    nsqd: &Arc<Nsqd>,
    client: &Arc<Client>,
    cmd: Command,
) -> Result<Reply, NsqError> {
    if nsqd.drain.is_draining() {
        crate::drain::check_tcp(&nsqd.engine, &cmd)?;
    }
    match cmd {
        Command::Nop => Ok(Reply::Nothing),
        Command::Fin { id } => {
            // read_loop batches FINs (`Fins`); this path serves any other caller.
            let ch = client.channel.get().expect("FIN allowed only after SUB");
            match ch.finish(client.id, &id) {
                Ok(()) => {
                    client.finished(1);
                    Ok(Reply::Nothing)
                }
                Err(e) => Err(NsqError::fin_failed(&id, &e.to_string())),
            }
        }
        Command::Rdy { count } => {
            client.set_ready_count(count);
            Ok(Reply::Nothing)
        }
        Command::Req { id, timeout_ms } => {
            let ch = client.channel.get().expect("REQ allowed only after SUB");
            let delay = clamp_req_timeout(timeout_ms, nsqd.tcp.limits.max_req_timeout_ms);
            match ch.requeue(client.id, &id, delay) {
                Ok(()) => {
                    client.requeued();
                    Ok(Reply::Nothing)
                }
                Err(e) => Err(NsqError::req_failed(&id, &e.to_string())),
            }
        }
        Command::Touch { id } => {
            let ch = client.channel.get().expect("TOUCH allowed only after SUB");
            let msg_timeout = client.settings.lock().msg_timeout;
            ch.touch(client.id, &id, msg_timeout)
                .map_err(|e: FinishError| NsqError::touch_failed(&id, &e.to_string()))?;
            Ok(Reply::Nothing)
        }
        Command::Pub { topic, body } => {
            check_auth(nsqd, client, "PUB", &topic, "").await?;
            let t = nsqd
                .topic(&topic)
                .await
                .map_err(|e| NsqError::pub_failed(&e.to_string()))?;
            // OK only once stored (and, in durable mode, synced): docs/durability.md.
            let receipt = t
                .put(body, Duration::ZERO)
                .map_err(|e| NsqError::pub_failed(&e.to_string()))?;
            acknowledge(nsqd, client, topic, 1, receipt, NsqError::pub_failed)
        }
        Command::Mpub { topic, bodies } => {
            check_auth(nsqd, client, "MPUB", &topic, "").await?;
            let n = bodies.len() as u64;
            let t = nsqd
                .topic(&topic)
                .await
                .map_err(|e| NsqError::mpub_failed(&e.to_string()))?;
            // OK only once stored (and, in durable mode, synced): docs/durability.md.
            let receipt = t
                .put_many(bodies, Duration::ZERO)
                .map_err(|e| NsqError::mpub_failed(&e.to_string()))?;
            acknowledge(nsqd, client, topic, n, receipt, NsqError::mpub_failed)
        }
        Command::Dpub {
            topic,
            defer_ms,
            body,
        } => {
            check_auth(nsqd, client, "DPUB", &topic, "").await?;
            let t = nsqd
                .topic(&topic)
                .await
                .map_err(|e| NsqError::dpub_failed(&e.to_string()))?;
            let defer = Duration::from_millis(defer_ms.max(0) as u64);
            // OK only once stored (and, in durable mode, synced): docs/durability.md.
            let receipt = t
                .put(body, defer)
                .map_err(|e| NsqError::dpub_failed(&e.to_string()))?;
            acknowledge(nsqd, client, topic, 1, receipt, NsqError::dpub_failed)
        }
        // Rare commands with large futures are boxed: a connection's reader task is as large
        // as the largest future it may await, for as long as the connection lives.
        Command::Sub { topic, channel } => Box::pin(sub(nsqd, client, &topic, &channel)).await,
        Command::Cls => {
            client.set_ready_count(0);
            client.set_state(ConnState::Closing);
            Ok(Reply::Response(Cow::Borrowed(frame::CLOSE_WAIT)))
        }
        Command::Identify { body } => identify(nsqd, client, &body),
        Command::Auth { body } => Box::pin(auth(nsqd, client, body)).await,
    }
}

/// The acknowledgement of a stored publish (PUB, MPUB, DPUB): OK once durable (docs/durability.md)
/// and, when replicated, on N-1 replicas (docs/replication.md, Acknowledgement); `failed`
/// makes the command's error from the reason. Nothing to wait for (replication off, memory or
/// non-durable mode): answered here, as before. Otherwise the wait is polled once and, if not
/// ready, handed to the reader as [`Reply::Wait`] so the connection's next commands are read
/// and stored meanwhile; the answers still go out in command order (nsqd/protocol_v2.go,
/// `IOLoop`, answers each command before reading the next).
fn acknowledge(
    nsqd: &Arc<Nsqd>,
    client: &Arc<Client>,
    topic: String,
    n: u64,
    receipt: PutReceipt,
    failed: fn(&str) -> NsqError,
) -> Result<Reply, NsqError> {
    let seq = receipt.replication_seq();
    if receipt.is_empty() && (seq == 0 || nsqd.replication.is_none()) {
        client.add_pub_count(&topic, n);
        return Ok(Reply::ok());
    }
    let (nsqd, client) = (nsqd.clone(), client.clone());
    let mut wait: AckWait = Box::pin(async move {
        receipt
            .durable()
            .await
            .map_err(|e| failed(&e.to_string()))?;
        if seq != 0 {
            nsqd.replicated(seq).await.map_err(|e| failed(&e))?;
        }
        client.add_pub_count(&topic, n);
        Ok(Reply::ok())
    });
    match wait.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Ok(Reply::Wait(wait)),
    }
}

/// IDENTIFY: applies the settings; answers, with the upgrades to perform if any.
fn identify(nsqd: &Nsqd, client: &Client, body: &[u8]) -> Result<Reply, NsqError> {
    let req = parse_identify(body)?;
    {
        let meta = &mut client.record.lock().meta;
        meta.client_id = req.client_id.clone();
        meta.hostname = req.hostname.clone();
        meta.user_agent = req.user_agent.clone();
    }
    let settings = req.validate(&nsqd.tcp.identify_limits)?;
    *client.settings.lock() = settings;
    client.wake.notify_one();
    if !req.feature_negotiation {
        return Ok(Reply::ok());
    }
    let negotiated = negotiate(&req, &nsqd.tcp.features)?;
    let resp = IdentifyResponse::new(
        nsqd.tcp.limits.max_rdy_count,
        nsqd.tcp.identify_limits.max_msg_timeout_ms,
        &settings,
        &negotiated,
        nsqd.tcp.features.max_deflate_level,
        nsqd.tcp.auth_required,
    );
    let resp = resp.to_json();
    if negotiated.tls_v1 || negotiated.snappy || negotiated.deflate {
        Ok(Reply::Upgrade(resp, negotiated))
    } else {
        Ok(Reply::Response(resp.into()))
    }
}

/// SUB (nsqd/protocol_v2.go, `SUB`): an ephemeral topic or channel that is being deleted is
/// retried once after 100 ms.
async fn sub(
    nsqd: &Arc<Nsqd>,
    client: &Arc<Client>,
    topic: &str,
    channel: &str,
) -> Result<Reply, NsqError> {
    check_auth(nsqd, client, "SUB", topic, channel).await?;
    let ephemeral = is_ephemeral(topic) || is_ephemeral(channel);
    for attempt in 0..2 {
        let t = nsqd
            .topic(topic)
            .await
            .map_err(|_| NsqError::sub_failed_exiting())?;
        let ch = match t.get_or_create_channel(channel) {
            Ok((ch, _)) => ch,
            Err(_) if ephemeral && attempt == 0 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) if ephemeral => return Err(NsqError::sub_failed_deleted()),
            Err(_) => return Err(NsqError::sub_failed_exiting()),
        };
        match ch.add_consumer(client.clone()) {
            Ok(()) => {
                let _ = client.channel.set(ch);
                client.set_state(ConnState::Subscribed);
                return Ok(Reply::ok());
            }
            Err(SubscribeError::TooManyConsumers(n)) => {
                return Err(NsqError::sub_consumer_limit(topic, channel, n as i64));
            }
            Err(SubscribeError::Exiting) if ephemeral && attempt == 0 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(SubscribeError::Exiting) if ephemeral => return Err(NsqError::sub_failed_deleted()),
            Err(SubscribeError::Exiting) => return Err(NsqError::sub_failed_exiting()),
        }
    }
    Err(NsqError::sub_failed_deleted())
}
