//! An nsqlookupd stand-in on its TCP port (the V1 protocol nsqd speaks to it): IDENTIFY is
//! answered with `http_port` as the lookupd's HTTP port, every other command with `OK`, while
//! `answering` is set; with it cleared, commands are read and left unanswered (a lookupd this
//! node no longer hears).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use nsq_protocol::lookup::{put_lookup_response, LookupCommand, LookupDecoder, LookupLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves `tcp` until the test ends.
pub fn serve(tcp: TcpListener, http_port: u16, answering: Arc<AtomicBool>) {
    tokio::spawn(async move {
        loop {
            let (mut s, _) = tcp.accept().await.unwrap();
            let answering = answering.clone();
            tokio::spawn(async move {
                let mut magic = [0u8; 4];
                if s.read_exact(&mut magic).await.is_err() {
                    return;
                }
                let mut dec = LookupDecoder::new(LookupLimits::default());
                let mut buf = BytesMut::new();
                loop {
                    while let Ok(Some(cmd)) = dec.decode(&mut buf, |_, _| Ok(())) {
                        if !answering.load(Ordering::SeqCst) {
                            continue;
                        }
                        let resp = match cmd {
                            LookupCommand::Identify { .. } => format!(
                                r#"{{"broadcast_address":"127.0.0.1","hostname":"fake","http_port":{http_port},"tcp_port":1,"version":"1.3.0"}}"#
                            ),
                            _ => "OK".to_string(),
                        };
                        let mut out = BytesMut::new();
                        put_lookup_response(&mut out, resp.as_bytes());
                        if s.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                    if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
            });
        }
    });
}
