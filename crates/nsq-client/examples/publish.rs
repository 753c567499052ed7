//! Publishes the lines of stdin (or one `hello` when stdin is empty) to a
//! topic on a local nsqd: `cargo run -p nsq-client --example publish -- 127.0.0.1:4150 events`.

use std::io::BufRead;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:4150".into());
    let topic = args.next().unwrap_or_else(|| "events".into());
    let producer = nsq_client::Producer::new(addr, nsq_client::Config::default())?;
    let mut n = 0;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        producer.publish(&topic, line).await?;
        n += 1;
    }
    if n == 0 {
        producer.publish(&topic, "hello").await?;
        n = 1;
    }
    eprintln!("published {n} message(s) to {topic}");
    Ok(())
}
