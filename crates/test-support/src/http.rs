//! A small HTTP/1.1 server on 127.0.0.1 for the tests of what fetches URLs (the server's image
//! URLs): each path one behaviour a fetcher must survive, each connection on a thread of its
//! own, every answer with `Connection: close`.
//!
//! | path | answer |
//! | --- | --- |
//! | `/image.png` | 200, the image, with its Content-Length |
//! | `/delay/MS/image.png` | the same after MS milliseconds |
//! | `/endless` | 200 without a length: zeros until the client hangs up ([`ImageHost::endless_written`]) |
//! | `/declared-large` | 200 declaring a 1 GiB Content-Length, then the image and a close |
//! | `/missing` | 404 |
//! | `/redirect` | 302 to `/image.png` |
//! | `/loop` | 302 to itself |
//! | `/to-file` | 302 to `file:///etc/passwd` |
//! | `/to-https` | 302 to the same host's `https://.../image.png` |

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most `/endless` writes when the client never hangs up.
const ENDLESS_CAP: u64 = 1 << 30;

struct State {
    image: Vec<u8>,
    requests: AtomicUsize,
    /// Bytes `/endless` wrote before its client hung up (or it reached its cap).
    endless_written: Mutex<Option<u64>>,
    stop: AtomicBool,
}

/// The server; dropped, it stops accepting.
pub struct ImageHost {
    addr: SocketAddr,
    state: Arc<State>,
}

impl ImageHost {
    /// A server of `image` on a free port of 127.0.0.1.
    pub fn start(image: Vec<u8>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("the address");
        let state = Arc::new(State {
            image,
            requests: AtomicUsize::new(0),
            endless_written: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let state = Arc::clone(&shared);
                std::thread::spawn(move || answer(stream, &state, addr));
            }
        });
        ImageHost { addr, state }
    }

    /// `http://127.0.0.1:PORT` and `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `host:port`, as a fetcher's messages name it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The bytes `/endless` wrote before its client hung up, waiting up to `wait` for it to;
    /// `None` when it was still writing.
    pub fn endless_written(&self, wait: Duration) -> Option<u64> {
        let until = Instant::now() + wait;
        loop {
            if let Some(n) = *self.state.endless_written.lock().expect("lock") {
                return Some(n);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ImageHost {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Reads a request's head and answers it by its path.
fn answer(mut stream: TcpStream, state: &State, addr: SocketAddr) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    state.requests.fetch_add(1, Ordering::SeqCst);
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let image = |stream: &mut TcpStream| {
        let top = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            state.image.len()
        );
        let _ = stream.write_all(top.as_bytes()).and_then(|()| stream.write_all(&state.image));
    };
    let redirect = |stream: &mut TcpStream, to: &str| {
        let top = format!("HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        let _ = stream.write_all(top.as_bytes());
    };
    match path.as_str() {
        "/image.png" => image(&mut stream),
        "/endless" => {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: image/png\r\nconnection: close\r\n\r\n");
            let chunk = vec![0u8; 64 << 10];
            let mut written = 0u64;
            while written < ENDLESS_CAP {
                match stream.write(&chunk) {
                    Ok(n) if n > 0 => written += n as u64,
                    _ => break,
                }
            }
            *state.endless_written.lock().expect("lock") = Some(written);
        }
        "/declared-large" => {
            let top =
                "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: 1073741824\r\nconnection: close\r\n\r\n";
            let _ = stream.write_all(top.as_bytes()).and_then(|()| stream.write_all(&state.image));
        }
        "/missing" => {
            let _ =
                stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found");
        }
        "/redirect" => redirect(&mut stream, "/image.png"),
        "/loop" => redirect(&mut stream, "/loop"),
        "/to-file" => redirect(&mut stream, "file:///etc/passwd"),
        "/to-https" => redirect(&mut stream, &format!("https://{addr}/image.png")),
        other => match other.strip_prefix("/delay/").and_then(|rest| rest.strip_suffix("/image.png")) {
            Some(ms) => {
                std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(0)));
                image(&mut stream);
            }
            None => {
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        },
    }
    let _ = stream.flush();
}
