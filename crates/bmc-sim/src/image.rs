//! A loopback HTTP server that serves one boot image, for a BMC (real or emulated) to fetch
//! when virtual media is attached. It counts the fetches; other paths answer 404.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;

pub struct ImageServer {
    /// The image's URL.
    pub url: String,
    fetches: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ImageServer {
    /// Serves `body` at `http://127.0.0.1:<port>/<name>`.
    pub async fn start(name: &str, body: Vec<u8>) -> std::io::Result<ImageServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/{name}", listener.local_addr()?);
        let fetches = Arc::new(AtomicU64::new(0));
        let state = (Arc::new(body), fetches.clone());
        let app = Router::new()
            .route(&format!("/{name}"), get(image))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ImageServer { url, fetches, task })
    }

    /// How many times the image was fetched.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }
}

impl Drop for ImageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn image(State((body, fetches)): State<(Arc<Vec<u8>>, Arc<AtomicU64>)>) -> Vec<u8> {
    fetches.fetch_add(1, Ordering::Relaxed);
    body.as_ref().clone()
}
