//! A consumer's connection to one nsqd (go-nsq conn.go, the consumer's side of it): dialing
//! (IDENTIFY, AUTH, SUB), then one task that reads frames — messages straight into the
//! consumer's queue, heartbeats answered with NOP, CLOSE_WAIT ending it once nothing is in
//! flight — and writes every FIN/REQ/TOUCH/RDY queued when it wakes in one write.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use nsq_protocol::command;
use nsq_protocol::frame::{FrameType, CLOSE_WAIT, HEARTBEAT};
use tokio::sync::mpsc;

use crate::conn::{self, BoxWrite, FrameReader};
use crate::error::Error;
use crate::golog::LogLevel;
use crate::message::Message;

use super::{ConnCmd, ConnShared, ConsumerShared, Event, MsgTx};

/// Commands the writer takes per write.
const WRITE_BATCH: usize = 1024;

/// Dials, identifies, subscribes and starts the connection task; reports to the coordinator.
pub(super) async fn dial(shared: Arc<ConsumerShared>, addr: String, id: u64, msg_tx: MsgTx) {
    if let Err(e) = dial_inner(&shared, &addr, id, msg_tx).await {
        tracing::error!("({addr}) error connecting to nsqd - {e}");
        let _ = shared.events.send(Event::ConnectFailed(addr, e));
    }
}

async fn dial_inner(
    shared: &Arc<ConsumerShared>,
    addr: &str,
    id: u64,
    msg_tx: MsgTx,
) -> Result<(), Error> {
    let mut c = conn::connect(addr, &shared.config, &shared.golog).await?;
    if c.identify.max_rdy_count > 0 && c.identify.max_rdy_count < shared.config.max_in_flight as i64
    {
        tracing::warn!(
            "({addr}) max RDY count {} < consumer max in flight {}, truncation possible",
            c.identify.max_rdy_count,
            shared.config.max_in_flight
        );
        shared.golog.log(LogLevel::Warning, || {
            format!(
                "({addr}) max RDY count {} < consumer max in flight {}, truncation possible",
                c.identify.max_rdy_count, shared.config.max_in_flight
            )
        });
    }
    let mut buf = BytesMut::new();
    command::put_sub(&mut buf, &shared.topic, &shared.channel);
    conn::write_all_timeout(&mut c.writer, &buf, shared.config.write_timeout).await?;
    loop {
        let f = c.reader.next().await?.ok_or(Error::NotConnected)?;
        match FrameType::from_i32(f.frame_type) {
            Some(FrameType::Response) if &f.data[..] == HEARTBEAT => {
                let mut nop = BytesMut::new();
                command::put_nop(&mut nop);
                conn::write_all_timeout(&mut c.writer, &nop, shared.config.write_timeout).await?;
            }
            Some(FrameType::Response) => break,
            Some(FrameType::Error) => {
                sub_refused(shared, addr, &f.data, c.reader).await;
                return Ok(());
            }
            _ => {
                return Err(Error::Protocol(format!(
                    "unexpected frame type {}",
                    f.frame_type
                )))
            }
        }
    }
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let conn = Arc::new(ConnShared {
        addr: addr.to_string(),
        cmd_tx,
        consumer: shared.clone(),
        in_flight: AtomicI64::new(0),
        received: AtomicU64::new(0),
        closing: std::sync::atomic::AtomicBool::new(false),
    });
    let max_rdy = if c.identify.max_rdy_count > 0 {
        c.identify.max_rdy_count
    } else {
        2500
    };
    let _ = shared.events.send(Event::Connected {
        addr: addr.to_string(),
        id,
        conn: conn.clone(),
        max_rdy,
    });
    tokio::spawn(conn_task(conn, c.reader, c.writer, cmd_rx, msg_tx, id));
    Ok(())
}

/// SUB was answered with an error frame. go-nsq's `ConnectToNSQD` writes SUB without waiting
/// for the answer and returns success (consumer.go), so the error reaches the connection's
/// read loop as `protocol error - <frame>` (conn.go, `readLoop`), nsqd closes the connection
/// (every SUB error is fatal to it) and the consumer reconnects as after any close
/// (`onConnClose`): after `lookupd_poll_interval` when the address was given, or through a
/// lookupd query. The caller of `connect_to_nsqd` gets `Ok`, as go-nsq's does.
async fn sub_refused(shared: &Arc<ConsumerShared>, addr: &str, frame: &[u8], mut r: FrameReader) {
    let text = String::from_utf8_lossy(frame);
    tracing::error!("({addr}) protocol error - {text}");
    let golog = &shared.golog;
    golog.conn(LogLevel::Error, addr, &format!("protocol error - {text}"));
    // Whatever nsqd still sends, up to its close (or the read timeout).
    let end = loop {
        match r.next().await {
            Ok(Some(_)) => continue,
            Ok(None) => break "EOF".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    golog.conn(LogLevel::Error, addr, &format!("IO error - {end}"));
    golog.conn_closed(addr, true);
    let _ = shared
        .events
        .send(Event::SubscribeRefused(addr.to_string()));
}

/// One connection: the reader and the writer run as two futures of one task; when either
/// ends, the other is dropped and the coordinator hears `Closed`.
async fn conn_task(
    conn: Arc<ConnShared>,
    reader: FrameReader,
    writer: BoxWrite,
    cmd_rx: mpsc::UnboundedReceiver<ConnCmd>,
    msg_tx: MsgTx,
    id: u64,
) {
    let golog = &conn.consumer.golog;
    tokio::select! {
        r = read_loop(&conn, reader, msg_tx) => {
            match r {
                Err(e) => {
                    tracing::error!("({}) IO error - {e}", conn.addr);
                    golog.conn(LogLevel::Error, &conn.addr, &format!("IO error - {e}"));
                }
                // nsqd hung up without being asked: Go's read fails with io.EOF
                // (conn.go, readLoop).
                Ok(()) if !conn.closing.load(Ordering::Acquire) => {
                    golog.conn(LogLevel::Error, &conn.addr, "IO error - EOF");
                }
                Ok(()) => {}
            }
        }
        r = write_loop(&conn, writer, cmd_rx) => {
            if let Err(e) = r {
                tracing::error!("({}) IO error - {e}", conn.addr);
                golog.conn(LogLevel::Error, &conn.addr, &format!("IO error - {e}"));
            }
        }
    }
    golog.conn_closed(&conn.addr, true);
    let _ = conn.consumer.events.send(Event::Closed {
        addr: conn.addr.clone(),
        id,
    });
}

async fn read_loop(conn: &Arc<ConnShared>, mut r: FrameReader, msg_tx: MsgTx) -> Result<(), Error> {
    let consumer = &*conn.consumer;
    let max_attempts = consumer.config.max_attempts;
    while let Some(frame) = r.next().await? {
        match FrameType::from_i32(frame.frame_type) {
            Some(FrameType::Message) => {
                let m = nsq_protocol::message::decode(frame.data)
                    .map_err(|e| Error::Protocol(e.to_string()))?;
                conn.in_flight.fetch_add(1, Ordering::Relaxed);
                conn.received.fetch_add(1, Ordering::Relaxed);
                consumer.stats.received.fetch_add(1, Ordering::Relaxed);
                let msg = Message::new(m.id, m.attempts, m.timestamp_ns, m.body, conn.clone());
                if max_attempts > 0 && m.attempts > max_attempts {
                    tracing::warn!("msg {} attempted {} times, giving up", m.id, m.attempts);
                    consumer.golog.log(LogLevel::Warning, || {
                        format!("msg {} attempted {} times, giving up", m.id, m.attempts)
                    });
                    if let Some(hook) = &consumer.give_up {
                        hook(&msg);
                    }
                    msg.finish();
                    continue;
                }
                // A closed queue drops (and so requeues) the message.
                let _ = msg_tx.send(msg);
            }
            Some(FrameType::Response) if &frame.data[..] == HEARTBEAT => {
                let _ = conn.cmd_tx.send(ConnCmd::Nop);
            }
            Some(FrameType::Response) if &frame.data[..] == CLOSE_WAIT => {
                tracing::info!("({}) received CLOSE_WAIT from nsqd", conn.addr);
                consumer
                    .golog
                    .conn(LogLevel::Info, &conn.addr, "received CLOSE_WAIT from nsqd");
                conn.closing.store(true, Ordering::Release);
                let _ = conn.cmd_tx.send(ConnCmd::Wake);
            }
            Some(FrameType::Response) => {}
            Some(FrameType::Error) => {
                tracing::error!(
                    "({}) protocol error - {}",
                    conn.addr,
                    String::from_utf8_lossy(&frame.data)
                );
                consumer.golog.conn(
                    LogLevel::Error,
                    &conn.addr,
                    &format!("protocol error - {}", String::from_utf8_lossy(&frame.data)),
                );
            }
            None => {
                return Err(Error::Protocol(format!(
                    "unknown frame type {}",
                    frame.frame_type
                )))
            }
        }
    }
    Ok(())
}

async fn write_loop(
    conn: &Arc<ConnShared>,
    mut w: BoxWrite,
    mut cmd_rx: mpsc::UnboundedReceiver<ConnCmd>,
) -> Result<(), Error> {
    let timeout = conn.consumer.config.write_timeout;
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    while cmd_rx.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        let mut done = 0;
        for cmd in batch.drain(..) {
            match cmd {
                ConnCmd::Fin(id) => {
                    command::put_fin(&mut buf, &id);
                    done += 1;
                }
                ConnCmd::Req(id, ms) => {
                    command::put_req(&mut buf, &id, ms);
                    done += 1;
                }
                ConnCmd::Touch(id) => command::put_touch(&mut buf, &id),
                ConnCmd::Rdy(n) => command::put_rdy(&mut buf, n),
                ConnCmd::Nop => command::put_nop(&mut buf),
                ConnCmd::Cls => command::put_cls(&mut buf),
                ConnCmd::Wake => {}
                ConnCmd::Close => return Ok(()),
            }
        }
        // Decremented before writing, so it is right even if the write fails (go-nsq
        // conn.go, writeLoop).
        let left = conn.in_flight.fetch_sub(done, Ordering::AcqRel) - done;
        if !buf.is_empty() {
            conn::write_all_timeout(&mut w, &buf, timeout).await?;
            buf.clear();
        }
        if left <= 0 && conn.closing.load(Ordering::Acquire) {
            return Ok(());
        }
    }
    Ok(())
}
