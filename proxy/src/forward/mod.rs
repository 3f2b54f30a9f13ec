//! The forward proxy (`HTTP_PROXY` / `HTTPS_PROXY`). A host listed in a
//! route's `hosts` is governed by that route's adapter:
//! - plain HTTP to it (absolute-form requests) directly;
//! - `CONNECT` to it is answered `200`, the TLS inside is terminated with a
//!   leaf certificate minted from the sidecar's CA ([`ca`]), each request
//!   is governed, then re-encrypted to the real host (verified against the
//!   system roots and the configured CA).
//!
//! Every other host is passed untouched: `CONNECT` becomes a byte-for-byte
//! tunnel, plain HTTP is forwarded as it came.

pub mod ca;

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::service::{Body, BoxError, RouteService, UpstreamBase, full};

/// The forward proxy of one sidecar.
pub struct ForwardProxy {
    /// (host pattern, route): `host` or `host:port`.
    governed: Vec<(String, Arc<RouteService>)>,
    ca: Arc<ca::Ca>,
    /// Ungoverned plain HTTP goes through this client, untouched.
    plain: crate::service::Upstream,
}

impl std::fmt::Debug for ForwardProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardProxy")
            .field(
                "governed",
                &self.governed.iter().map(|(h, _)| h).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

fn error(status: StatusCode, code: &str, message: String) -> Response<Body> {
    let mut resp = Response::new(full(json!({"error": message, "code": code}).to_string()));
    *resp.status_mut() = status;
    resp
}

impl ForwardProxy {
    pub fn new(
        governed: Vec<(String, Arc<RouteService>)>,
        ca: Arc<ca::Ca>,
        plain: crate::service::Upstream,
    ) -> ForwardProxy {
        ForwardProxy {
            governed,
            ca,
            plain,
        }
    }

    /// The route governing `authority` (`host:port`), if any.
    fn route_for(&self, authority: &str) -> Option<Arc<RouteService>> {
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        self.governed
            .iter()
            .find(|(pattern, _)| pattern == authority || pattern == host)
            .map(|(_, r)| r.clone())
    }

    /// Serves one request on the proxy listener.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        if req.method() == Method::CONNECT {
            return Ok(self.connect(req));
        }
        let Some(authority) = req.uri().authority().map(|a| a.as_str().to_owned()) else {
            return Ok(error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "a proxy request names its target: http://host/path".to_owned(),
            ));
        };
        let base: Uri = match format!("http://{authority}").parse() {
            Ok(u) => u,
            Err(_) => {
                return Ok(error(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "bad target".into(),
                ));
            }
        };
        match self.route_for(&authority) {
            Some(route) => {
                let mut req = req;
                req.extensions_mut().insert(UpstreamBase(base));
                route.handle(req).await
            }
            None => Ok(self.pass(req).await),
        }
    }

    /// Plain HTTP to an ungoverned host, forwarded as it came.
    async fn pass(&self, req: Request<Incoming>) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        crate::service::strip_hop_by_hop(&mut parts.headers);
        let req = Request::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed());
        match self.plain.request(req).await {
            Ok(resp) => resp.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed()),
            Err(e) => error(
                StatusCode::BAD_GATEWAY,
                "upstream_unavailable",
                format!("the upstream is unreachable: {e}"),
            ),
        }
    }

    /// `CONNECT host:port`: intercepted if governed, else tunnelled.
    fn connect(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let Some(authority) = req.uri().authority().map(|a| a.as_str().to_owned()) else {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "CONNECT needs host:port".into(),
            );
        };
        let route = self.route_for(&authority);
        let proxy = self.clone();
        tokio::spawn(async move {
            let upgraded = match hyper::upgrade::on(req).await {
                Ok(u) => TokioIo::new(u),
                Err(e) => {
                    tracing::warn!(error = %e, "CONNECT: upgrade failed");
                    return;
                }
            };
            match route {
                Some(route) => proxy.intercept(upgraded, &authority, route).await,
                None => tunnel(upgraded, &authority).await,
            }
        });
        Response::new(full(""))
    }

    /// Terminates TLS for a governed host and serves its requests through
    /// the route, re-encrypted upstream.
    async fn intercept(
        &self,
        client: TokioIo<hyper::upgrade::Upgraded>,
        authority: &str,
        route: Arc<RouteService>,
    ) {
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        let config = match self.ca.server_config(host) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, host, "cannot mint a certificate; closing");
                return;
            }
        };
        let tls = match tokio_rustls::TlsAcceptor::from(config).accept(client).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, host, "TLS handshake with the agent failed");
                return;
            }
        };
        let Ok(base) = format!("https://{authority}").parse::<Uri>() else {
            return;
        };
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(UpstreamBase(base.clone()));
            route.clone().handle(req)
        });
        if let Err(e) = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tls), service)
            .await
        {
            tracing::debug!(error = %e, "intercepted connection ended with an error");
        }
    }
}

/// Copies bytes both ways between the agent and `authority`, untouched.
async fn tunnel(mut client: TokioIo<hyper::upgrade::Upgraded>, authority: &str) {
    match tokio::net::TcpStream::connect(authority).await {
        Ok(mut upstream) => {
            if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                tracing::debug!(error = %e, "tunnel closed with an error");
            }
        }
        Err(e) => tracing::warn!(error = %e, authority, "CONNECT: upstream unreachable"),
    }
}
