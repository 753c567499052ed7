//! One nsqd connection on the TCP listener (nsqlookupd/lookup_protocol_v1.go, `IOLoop`): the `"  V1"` magic, then commands
//! decoded by `nsq_protocol::lookup::LookupDecoder` and answered with size-prefixed frames.
//! Every error is fatal: the error frame is written and the connection closed. When the
//! connection ends, an IDENTIFYed peer is removed from every registration (`lookup_protocol_v1.go`, the end of `IOLoop`).
//!
//! One task per connection: nsqd instances hold one connection each and talk rarely (a PING
//! every 15 s), so there is nothing to batch.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use nsq_protocol::command::DecodeError;
use nsq_protocol::lookup::{
    gate, parse_peer_info, put_lookup_response, LookupCommand, LookupDecoder, LookupLimits,
    PeerInfo,
};
use nsq_protocol::{NsqError, MAGIC_V1};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::db::{now_nanos, Peer};
use crate::nsqlookupd::Nsqlookupd;

/// Go's `net.Addr.String()` for a TCP peer: IPv4-mapped IPv6 addresses print as IPv4.
pub fn go_addr_string(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => format!("{v4}:{}", v6.port()),
            None => addr.to_string(),
        },
        SocketAddr::V4(_) => addr.to_string(),
    }
}

/// Serves one connection until the client goes away, an error ends it, or `stop` fires.
pub async fn serve(
    lookupd: Arc<Nsqlookupd>,
    stream: TcpStream,
    remote: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let remote = go_addr_string(remote);
    tracing::info!("TCP: new client({remote})");
    let mut conn = Conn {
        lookupd,
        stream,
        remote,
        peer: None,
        out: BytesMut::with_capacity(256),
    };
    tokio::select! {
        _ = conn.run() => {}
        _ = stop.wait_for(|s| *s) => {}
    }
    let _ = conn.stream.shutdown().await;
    tracing::info!("CLIENT({}): closing", conn.remote);
    if let Some(peer) = conn.peer.take() {
        for r in conn.lookupd.db.remove_peer(&peer.id) {
            tracing::info!("DB: client({}) UNREGISTER {r}", conn.remote);
        }
    }
}

/// One connection's state.
struct Conn {
    lookupd: Arc<Nsqlookupd>,
    stream: TcpStream,
    /// The peer address as the reference prints it; the peer id once IDENTIFYed.
    remote: String,
    /// Set by IDENTIFY.
    peer: Option<Arc<Peer>>,
    /// Response bytes waiting to be written.
    out: BytesMut,
}

impl Conn {
    async fn run(&mut self) {
        let mut magic = [0u8; 4];
        if self.stream.read_exact(&mut magic).await.is_err() {
            return;
        }
        tracing::info!(
            "CLIENT({}): desired protocol magic '{}'",
            self.remote,
            String::from_utf8_lossy(&magic)
        );
        if &magic != MAGIC_V1 {
            self.fail(NsqError::bad_protocol()).await;
            return;
        }

        let mut decoder = LookupDecoder::new(LookupLimits::default());
        let mut buf = BytesMut::with_capacity(4096);
        loop {
            // Decode and execute every complete command in the buffer, then flush.
            loop {
                let identified = self.peer.is_some();
                let decoded = decoder.decode(&mut buf, |_name, kind| gate(identified, kind));
                match decoded {
                    Ok(Some(cmd)) => match self.exec(cmd) {
                        Ok(()) => {}
                        Err(e) => {
                            self.fail(e).await;
                            return;
                        }
                    },
                    Ok(None) => break,
                    Err(DecodeError::Fatal(e)) => {
                        self.fail(e).await;
                        return;
                    }
                    Err(DecodeError::LineTooLong) => {
                        tracing::error!("[{}] - command line too long", self.remote);
                        let _ = self.flush().await;
                        return;
                    }
                }
            }
            if self.flush().await.is_err() {
                return;
            }
            match self.stream.read_buf(&mut buf).await {
                Ok(n) if n > 0 => {}
                _ => {
                    // EOF (or read error) inside an IDENTIFY body gets the reference's error.
                    if let Some(e) = decoder.incomplete_read_error(&buf) {
                        self.fail(e).await;
                    }
                    return;
                }
            }
        }
    }

    /// Executes one decoded command, queueing its response.
    fn exec(&mut self, cmd: LookupCommand) -> Result<(), NsqError> {
        let db = &self.lookupd.db;
        match cmd {
            LookupCommand::Ping => {
                if let Some(p) = &self.peer {
                    p.touch(now_nanos());
                }
            }
            LookupCommand::Identify { body } => {
                let info = parse_peer_info(&body)?;
                let peer = Peer::new(self.remote.clone(), info, now_nanos());
                tracing::info!(
                    "CLIENT({}): IDENTIFY Address:{} TCP:{} HTTP:{} Version:{}",
                    self.remote,
                    peer.info.broadcast_address,
                    peer.info.tcp_port,
                    peer.info.http_port,
                    peer.info.version
                );
                if db.identify(&peer) {
                    tracing::info!(
                        "DB: client({}) REGISTER category:client key: subkey:",
                        self.remote
                    );
                }
                self.peer = Some(peer);
                let l = &self.lookupd;
                let reply = PeerInfo {
                    broadcast_address: l.opts.broadcast_address.clone(),
                    hostname: l.hostname.clone(),
                    http_port: i64::from(l.http_addr.port()),
                    tcp_port: i64::from(l.tcp_addr.port()),
                    version: crate::options::VERSION.to_string(),
                    replication: None,
                };
                put_lookup_response(&mut self.out, &crate::http::go_json(&reply));
                return Ok(());
            }
            LookupCommand::Register { topic, channel } => {
                let peer = self.peer.as_ref().expect("gated on IDENTIFY");
                for r in db.register(peer, &topic, channel.as_deref()) {
                    tracing::info!("DB: client({}) REGISTER {r}", self.remote);
                }
            }
            LookupCommand::Unregister { topic, channel } => {
                let peer = self.peer.as_ref().expect("gated on IDENTIFY");
                for r in db.unregister(&peer.id, &topic, channel.as_deref()) {
                    if channel.is_none() && r.category == crate::db::Category::Channel {
                        tracing::warn!("client({}) unexpected UNREGISTER {r}", self.remote);
                    } else {
                        tracing::info!("DB: client({}) UNREGISTER {r}", self.remote);
                    }
                }
            }
        }
        put_lookup_response(&mut self.out, b"OK");
        Ok(())
    }

    /// Sends the pending responses and the error frame (the connection is then closed).
    async fn fail(&mut self, e: NsqError) {
        let data = e.to_frame_data();
        tracing::error!("[{}] - {}", self.remote, String::from_utf8_lossy(&data));
        put_lookup_response(&mut self.out, &data);
        let _ = self.flush().await;
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.out).await;
        self.out.clear();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_strings() {
        let a: SocketAddr = "[::ffff:10.0.0.5]:4150".parse().unwrap();
        assert_eq!(go_addr_string(a), "10.0.0.5:4150");
        let b: SocketAddr = "[::1]:4150".parse().unwrap();
        assert_eq!(go_addr_string(b), "[::1]:4150");
        let c: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(go_addr_string(c), "127.0.0.1:1");
    }
}
