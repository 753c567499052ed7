//! The shared state of one nsqadmin (nsqadmin/nsqadmin.go, `NSQAdmin`): the options (replaced
//! at run time by `PUT /config`), the routes under `--base-path`, the notifier and the chart
//! history, held in an `Arc` by every request. Starting and stopping is `server.rs`.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::client::HttpClient;
use crate::cluster::ClusterInfo;
use crate::history::History;
use crate::http::Routes;
use crate::notify::Notifier;
use crate::options::{AdminOptions, Cidr};

/// Shared state of a running nsqadmin.
pub struct Admin {
    /// The options; `PUT /config/<opt>` replaces them atomically (a short write lock, never
    /// held across an `.await`).
    pub(crate) opts: RwLock<Arc<AdminOptions>>,
    /// Built from the options; replaced with them (a short write lock, never held across an
    /// `.await`: callers clone the client out).
    pub(crate) client: RwLock<HttpClient>,
    pub(crate) routes: Routes,
    pub base_path: String,
    pub cidr: Option<Cidr>,
    pub notifier: Notifier,
    pub history: Option<Arc<History>>,
    /// nsqadmin's host name (`via` in notifications).
    pub hostname: String,
}

impl Admin {
    pub fn opts(&self) -> Arc<AdminOptions> {
        self.opts.read().clone()
    }

    /// Replaces the options (and the HTTP client built from them; a client that cannot be
    /// built keeps the previous one).
    pub fn set_opts(&self, o: AdminOptions) {
        match build_client(&o) {
            Ok(c) => *self.client.write() = c,
            Err(e) => tracing::error!("keeping the previous HTTP client - {e}"),
        }
        *self.opts.write() = Arc::new(o);
    }

    /// The upstream HTTP(S) client (`--http-client-*`).
    pub fn client(&self) -> HttpClient {
        self.client.read().clone()
    }

    /// The upstream view for one request (current lookupd/nsqd lists).
    pub fn cluster(&self) -> ClusterInfo {
        let o = self.opts();
        ClusterInfo {
            client: self.client(),
            lookupds: o.lookupd_http_addresses.clone(),
            nsqds: o.nsqd_http_addresses.clone(),
        }
    }
}

/// The upstream client for these options: timeouts, TLS (`--http-client-tls-*`), and the
/// reference's `User-Agent`.
pub(crate) fn build_client(o: &AdminOptions) -> Result<HttpClient, nsq_http::client::BuildError> {
    nsq_http::client::HttpClient::new(&nsq_http::client::ClientOptions {
        connect_timeout: o.http_client_connect_timeout,
        request_timeout: o.http_client_request_timeout,
        user_agent: format!("nsqadmin/v{}", crate::options::VERSION),
        tls: nsq_http::client::TlsOptions {
            root_ca_file: o.http_client_tls_root_ca_file.clone(),
            cert_file: o.http_client_tls_cert.clone(),
            key_file: o.http_client_tls_key.clone(),
            insecure_skip_verify: o.http_client_tls_insecure_skip_verify,
        },
        follow_redirects: true,
    })
    .map(HttpClient::new)
}
