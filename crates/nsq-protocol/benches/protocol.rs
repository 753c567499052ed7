//! Criterion benchmarks for the hot protocol paths: FIN decoding, MPUB decoding and
//! message-frame encoding.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use nsq_protocol::command::{encode_command, Command, Decoder, Limits};
use nsq_protocol::frame::put_message;
use nsq_protocol::MessageId;

fn decode_all(input: &BytesMut) -> usize {
    let mut buf = input.clone();
    let mut d = Decoder::new(Limits::default());
    let mut n = 0;
    while let Some(c) = d.decode(&mut buf, |_, _| Ok(())).expect("valid input") {
        black_box(&c);
        n += 1;
    }
    n
}

fn bench_fin(c: &mut Criterion) {
    let mut input = BytesMut::new();
    for i in 0..1000u64 {
        let cmd = match i % 10 {
            0 => Command::Rdy { count: 100 },
            1 => Command::Nop,
            2 => Command::Req {
                id: MessageId::from_u64(i),
                timeout_ms: 1000,
            },
            3 => Command::Touch {
                id: MessageId::from_u64(i),
            },
            _ => Command::Fin {
                id: MessageId::from_u64(i),
            },
        };
        encode_command(&mut input, &cmd);
    }
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("1000_fin_mixed", |b| {
        b.iter(|| assert_eq!(decode_all(&input), 1000))
    });
    g.finish();
}

fn bench_mpub(c: &mut Criterion) {
    let bodies: Vec<Bytes> = (0..200).map(|i| Bytes::from(vec![i as u8; 200])).collect();
    let mut input = BytesMut::new();
    encode_command(
        &mut input,
        &Command::Mpub {
            topic: "bench".into(),
            bodies,
        },
    );
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Bytes(input.len() as u64));
    g.bench_function("mpub_200x200B", |b| {
        b.iter(|| assert_eq!(decode_all(&input), 1))
    });
    g.finish();
}

fn bench_encode_frames(c: &mut Criterion) {
    let body = vec![b'x'; 200];
    let id = MessageId::from_u64(0x18acd669e6269000);
    let mut buf = BytesMut::with_capacity(1000 * (8 + 26 + 200));
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("1000_message_frames_200B", |b| {
        b.iter(|| {
            buf.clear();
            for i in 0..1000 {
                put_message(
                    &mut buf,
                    1_700_000_000_000_000_000 + i,
                    1,
                    &id,
                    black_box(&body),
                );
            }
            black_box(buf.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench_fin, bench_mpub, bench_encode_frames);
criterion_main!(benches);
