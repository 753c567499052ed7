//! A replication origin played by hand with the link codec (`nsq_protocol::replication`):
//! it can vanish without a clean stop (its connection simply closes, as a killed process's
//! does) and come back with any HELLO. Used by the takeover tests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use nsq_protocol::message::MessageId;
use nsq_protocol::replication::{
    self, Admin, AdminOp, Frame, Hello, Pub, PubMessage, LINK_VERSION, MAGIC_R1, NONCE_LEN,
};
use nsqd::NsqdHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const ORIGIN: u64 = 0x00ab_cdef_0123_4567;

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

pub fn id(n: u8) -> MessageId {
    let mut b = *b"0000000000000000";
    b[15] = b'0' + n;
    MessageId(b)
}

/// The origin, played by hand.
pub struct Origin {
    s: TcpStream,
    buf: BytesMut,
}

impl Origin {
    /// Dials `b`, sends the magic and HELLO of `epoch`; returns the origin and the answer.
    pub async fn hello(
        b: &NsqdHandle,
        epoch: u64,
        previous_unclean: Option<u64>,
    ) -> (Origin, Frame) {
        let mut s = TcpStream::connect(b.tcp_addr()).await.unwrap();
        s.write_all(MAGIC_R1).await.unwrap();
        let mut o = Origin {
            s,
            buf: BytesMut::new(),
        };
        o.send(&Frame::Hello(Hello {
            version: LINK_VERSION,
            node_id: ORIGIN,
            epoch,
            resume: false,
            sync: false,
            previous_unclean: previous_unclean.is_some(),
            resume_seq: 0,
            previous_epoch: previous_unclean.unwrap_or(0),
            replicas: 2,
            max_frame: replication::MIN_MAX_FRAME,
            nsqd_node_id: 1001,
            broadcast_address: "127.0.0.1".into(),
            tcp_port: 1,
            http_port: 2,
            nonce: [1; NONCE_LEN],
        }))
        .await;
        // The membership handshake of a group without a secret (B lists 127.0.0.1 as a
        // peer): empty proofs both ways.
        match o.recv().await {
            Frame::Challenge(c) => assert!(c.proof.is_empty()),
            other => return (o, other),
        }
        o.send(&Frame::Auth {
            proof: Default::default(),
        })
        .await;
        let answer = o.recv().await;
        (o, answer)
    }

    pub async fn send(&mut self, f: &Frame) {
        let mut b = BytesMut::new();
        replication::encode(f, &mut b);
        self.s.write_all(&b).await.unwrap();
    }

    /// The next frame that is not a HEARTBEAT, a STATUS or a PONG.
    pub async fn recv(&mut self) -> Frame {
        loop {
            let f = self.any().await;
            if !matches!(
                f,
                Frame::Heartbeat | Frame::Status(_) | Frame::Ping { .. } | Frame::Pong { .. }
            ) {
                return f;
            }
        }
    }

    /// The next frame, whatever it is.
    pub async fn any(&mut self) -> Frame {
        loop {
            if let Some(f) = replication::decode(&mut self.buf, replication::MIN_MAX_FRAME).unwrap()
            {
                return f;
            }
            let n = tokio::time::timeout(Duration::from_secs(10), self.s.read_buf(&mut self.buf))
                .await
                .expect("a frame within 10 s")
                .unwrap();
            assert!(n > 0, "closed");
        }
    }

    /// Reads until an ACK of `seq`.
    pub async fn acked(&mut self, seq: u64) {
        loop {
            match self.recv().await {
                Frame::Ack { seq: s } if s >= seq => return,
                Frame::Ack { .. } => {}
                other => panic!("expected ACK, got {other:?}"),
            }
        }
    }
}

pub fn admin(seq: u64, op: AdminOp, topic: &str, channel: &str) -> Frame {
    Frame::Admin(Admin {
        seq,
        op,
        topic: topic.into(),
        channel: channel.into(),
        settings: Vec::new(),
    })
}

pub fn publish(seq: u64, topic: &str, channels: &[&str], defer_until: i64, ids: &[u8]) -> Frame {
    Frame::Pub(Pub {
        seq,
        topic: topic.into(),
        defer_until,
        channels: channels.iter().map(|c| c.to_string()).collect(),
        messages: ids
            .iter()
            .map(|&n| PubMessage {
                id: id(n),
                timestamp: 1_600_000_000_000_000_000 + i64::from(n),
                body: Bytes::from(format!("body-{n}")),
            })
            .collect(),
    })
}
