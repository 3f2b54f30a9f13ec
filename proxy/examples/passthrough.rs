//! The benchmark's baseline: a plain hyper reverse proxy that forwards
//! every request to one upstream through a pooled client, with the same
//! hop-by-hop header handling as the sidecar and no governance. What
//! warden-proxy adds is measured against this.
//!
//! Usage: `passthrough LISTEN UPSTREAM` (such as `127.0.0.1:0 http://127.0.0.1:7000`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

type Body = BoxBody<Bytes, hyper::Error>;

async fn forward(
    client: Arc<Client<HttpConnector, Incoming>>,
    upstream: Arc<String>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{upstream}{pq}").parse::<Uri>().unwrap_or_default();
    for h in [
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        parts.headers.remove(h);
    }
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(_) => {
            let mut resp = Response::new(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *resp.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            Ok(resp)
        }
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let upstream = Arc::new(
        args.next()
            .unwrap_or_else(|| "http://127.0.0.1:7000".into()),
    );
    let client = Arc::new(Client::builder(TokioExecutor::new()).build_http::<Incoming>());
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    eprintln!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (client, upstream) = (client.clone(), upstream.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                forward(client.clone(), upstream.clone(), req)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
