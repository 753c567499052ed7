//! Startup and shutdown: validate the options, bind the listener (logging
//! `HTTP: listening on ADDR`), start the notification sender and the history poller, serve.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::admin::Admin;
use crate::history::History;
use crate::http::Routes;
use crate::notify::Notifier;
use crate::options::{AdminOptions, Cidr};
use nsq_http::listen::{self as listen, ListenError};

/// Why nsqadmin could not start; each Display is the reference's text (nsqadmin/nsqadmin.go,
/// New), which `apps/nsqadmin` prefixes with `failed to instantiate nsqadmin - `.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// An invalid option ([`AdminOptions::validate`], in the reference's words).
    #[error(transparent)]
    Options(#[from] crate::options::OptionsError),
    /// `--allow-config-from-cidr` does not parse ([`Cidr::parse`]).
    #[error(transparent)]
    Cidr(#[from] crate::options::InvalidCidr),
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The bound socket's address could not be read.
    #[error(transparent)]
    LocalAddr(std::io::Error),
    #[error(transparent)]
    HttpClient(#[from] nsq_http::client::BuildError),
}

/// A running nsqadmin: its address and how to stop it.
pub struct AdminHandle {
    pub admin: Arc<Admin>,
    pub http_addr: SocketAddr,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
}

impl AdminHandle {
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Closes the listener and waits for the server task.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.done.await;
    }
}

/// Validates `opts`, binds, and serves in the background. The error text follows
/// `failed to instantiate nsqadmin - `.
pub async fn start(opts: AdminOptions) -> Result<AdminHandle, StartError> {
    opts.validate().map_err(StartError::Options)?;
    let cidr = if opts.allow_config_from_cidr.is_empty() {
        None
    } else {
        Some(Cidr::parse(&opts.allow_config_from_cidr).map_err(StartError::Cidr)?)
    };
    let listener = listen::bind(&opts.http_address).await?;
    let http_addr = listener.local_addr().map_err(StartError::LocalAddr)?;
    tracing::info!("HTTP: listening on {http_addr}");

    let base_path = opts.normalized_base_path();
    let client = crate::admin::build_client(&opts)?;
    let history = (!opts.history_interval.is_zero()).then(|| {
        Arc::new(History::new(
            opts.history_interval,
            usize::try_from(opts.history_size).unwrap_or(0),
        ))
    });
    let admin = Arc::new(Admin {
        routes: Routes::new(&base_path, opts.proxy_graphite),
        base_path,
        cidr,
        notifier: Notifier::start(&opts.notification_http_endpoint, client.clone()),
        client: RwLock::new(client),
        history: history.clone(),
        hostname: nsq_go::os::hostname(),
        opts: RwLock::new(Arc::new(opts)),
    });
    let (stop, stop_rx) = watch::channel(false);
    if let Some(h) = history {
        tokio::spawn(crate::history::run(admin.clone(), h, stop_rx.clone()));
    }
    let app = crate::http::router(admin.clone());
    let mut stop2 = stop_rx;
    let done = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop2.wait_for(|s| *s).await;
        };
        nsq_http::serve::serve(listener, app, shutdown).await;
        tracing::info!("HTTP: closing {http_addr}");
    });
    Ok(AdminHandle {
        admin,
        http_addr,
        stop,
        done,
    })
}

nsq_http::impl_daemon!(AdminHandle, AdminOptions, StartError, "nsqadmin");

#[cfg(test)]
mod tests {
    /// The HTTP listener queues as many connects as the system allows (`net.core.somaxconn`,
    /// as Go's `net.Listen`), not the 128 that Tokio's `TcpListener::bind` asks for.
    #[tokio::test]
    async fn listener_has_the_system_backlog() {
        let Some(want) = nsq_testkit::sockets::somaxconn() else {
            eprintln!("no /proc/sys/net/core/somaxconn: skipped");
            return;
        };
        let args = [
            "nsqadmin",
            "--http-address=127.0.0.1:0",
            "--nsqd-http-address=127.0.0.1:1",
        ];
        let crate::options::ParseOutcome::Run(opts) =
            crate::options::parse_args(args.map(String::from).to_vec()).unwrap()
        else {
            panic!("not a run")
        };
        let h = crate::start(opts).await.unwrap();
        match nsq_testkit::sockets::listen_backlog(h.http_addr().port()) {
            Some(got) => assert_eq!(got, want),
            None => eprintln!("`ss` not available: skipped"),
        }
        h.shutdown().await;
    }
}
