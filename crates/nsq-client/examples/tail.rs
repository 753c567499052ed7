//! Prints the messages of a topic from a local nsqd until Ctrl-C:
//! `cargo run -p nsq-client --example tail -- 127.0.0.1:4150 events [count]`.

use nsq_client::{Config, Consumer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:4150".into());
    let topic = args.next().unwrap_or_else(|| "events".into());
    let count: Option<usize> = args.next().map(|n| n.parse()).transpose()?;
    let config = Config {
        max_in_flight: 200,
        ..Config::default()
    };
    let mut consumer = Consumer::new(topic, "tail#ephemeral", config)?;
    consumer.connect_to_nsqd(addr).await?;
    let stop = consumer.stop_handle();
    tokio::spawn(async move {
        tokio::signal::ctrl_c().await.ok();
        stop.stop().await;
    });
    let mut seen = 0;
    while let Some(msg) = consumer.next().await {
        println!("{}", String::from_utf8_lossy(msg.body()));
        msg.finish();
        seen += 1;
        if count == Some(seen) {
            consumer.stop().await;
        }
    }
    Ok(())
}
