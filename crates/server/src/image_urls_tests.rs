//! The tests of image URL fetching (`image_urls.rs`) against a local http server, and the
//! fetchers `images.rs`'s tests share.

use super::*;
use nornir_test_support::http::ImageHost;

pub(crate) const PNG: &[u8] = b"\x89PNG\r\n\x1a\nnot decoded here";

pub(crate) fn fetcher(config: ServerConfig) -> Fetcher {
    Fetcher::new(&config.with_image_urls(true)).expect("allowed")
}

/// A fetcher of at most 1 KiB in 1 s.
pub(crate) fn small() -> Fetcher {
    fetcher(ServerConfig::default().with_image_url_max_bytes(1024).with_image_url_timeout(Duration::from_secs(1)))
}

pub(crate) fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn fetch(f: &Fetcher, url: &str) -> Result<Vec<u8>, Failed> {
    f.fetch(Url::parse(url).expect("a URL"), far())
}

#[test]
fn an_image_is_fetched_and_a_redirect_followed() {
    let host = ImageHost::start(PNG.to_vec());
    let f = small();
    assert_eq!(fetch(&f, &host.url("/image.png")).expect("fetched"), PNG);
    assert_eq!(fetch(&f, &host.url("/redirect")).expect("redirected"), PNG);
    assert_eq!(host.requests(), 3);
}

#[test]
fn a_body_over_the_limit_stops_the_read_and_names_the_limit() {
    let host = ImageHost::start(PNG.to_vec());
    let f = small();
    let started = Instant::now();
    let failed = fetch(&f, &host.url("/endless")).expect_err("too large");
    assert_eq!(failed.why, Failure::TooLarge);
    assert!(started.elapsed() < Duration::from_secs(1), "refused at the limit, not at the time limit");
    // The client hung up: the server wrote the limit and what the sockets' buffers hold
    // (a few MiB on loopback), not the 1 GiB it would have.
    let written = host.endless_written(Duration::from_secs(10)).expect("the client hung up");
    assert!(written < 64 << 20, "{written} bytes written");
    let m = failed.into_error("input[1].image", &f, Duration::from_secs(60)).message;
    assert!(m.starts_with("input[1].image: ") && m.contains("1024 bytes (--image-url-max-bytes)"), "{m}");
    assert!(m.contains(&host.host()) && !m.contains('\n'), "{m}");
    // A Content-Length over the limit is refused before the body is read.
    assert_eq!(fetch(&f, &host.url("/declared-large")).expect_err("declared").why, Failure::TooLarge);
    // At the limit exactly is taken.
    let exact = fetcher(ServerConfig::default().with_image_url_max_bytes(PNG.len()));
    assert_eq!(fetch(&exact, &host.url("/image.png")).expect("at the limit"), PNG);
    let under = fetcher(ServerConfig::default().with_image_url_max_bytes(PNG.len() - 1));
    assert_eq!(fetch(&under, &host.url("/image.png")).expect_err("over").why, Failure::TooLarge);
}

#[test]
fn a_slow_answer_is_cut_at_the_time_limit_or_the_requests() {
    let host = ImageHost::start(PNG.to_vec());
    let f = small();
    let started = Instant::now();
    let failed = fetch(&f, &host.url("/delay/5000/image.png")).expect_err("too slow");
    assert_eq!(failed.why, Failure::TimedOut { request: false });
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    let m = failed.into_error("images[0]", &f, Duration::from_secs(60)).message;
    assert!(m.starts_with("images[0]: ") && m.contains("longer than 1 s (--image-url-timeout)"), "{m}");
    // The request's time, when it ends first, answers 504 naming --request-timeout.
    let slow = fetcher(ServerConfig::default());
    let soon = Instant::now() + Duration::from_secs(1);
    let failed = slow.fetch(Url::parse(&host.url("/delay/5000/image.png")).expect("url"), soon).expect_err("late");
    assert_eq!(failed.why, Failure::TimedOut { request: true });
    let e = failed.into_error("images[0]", &slow, Duration::from_secs(1));
    assert_eq!(e.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(e.message.contains("--request-timeout"), "{}", e.message);
}

#[test]
fn statuses_unreachable_hosts_and_redirects_it_does_not_follow_are_named() {
    let host = ImageHost::start(PNG.to_vec());
    let f = small();
    let why = |path: &str| fetch(&f, &host.url(path)).expect_err(path).why;
    assert_eq!(why("/missing"), Failure::Status(404, "Not Found".to_owned()));
    assert_eq!(why("/to-file"), Failure::Scheme("file".to_owned()));
    assert_eq!(why("/to-https"), Failure::Https);
    assert_eq!(why("/loop"), Failure::TooManyRedirects);
    let m = fetch(&f, &host.url("/missing")).expect_err("404").why.message("images[3]", &host.host(), &f);
    assert!(m.starts_with("images[3]: ") && m.contains("answered HTTP 404 Not Found"), "{m}");
    // A port nothing listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let failed = fetch(&f, &format!("http://{closed}/image.png")).expect_err("refused");
    assert!(matches!(&failed.why, Failure::Unreachable(r) if r.contains("onnect")), "{:?}", failed.why);
    let m = failed.into_error("images[0]", &f, Duration::from_secs(60)).message;
    assert!(m.starts_with(&format!("images[0]: cannot fetch from {closed} (")) && !m.contains('\n'), "{m}");
}

#[test]
fn a_read_holds_at_most_the_limit_and_one_byte() {
    struct Counting<R>(R, usize);
    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1 += n;
            Ok(n)
        }
    }
    for (limit, hint) in [(1000, None), (100_000, None), (100_000, Some(1 << 30)), (5, Some(3))] {
        let mut r = Counting(std::io::repeat(7).take(10 << 20), 0);
        let bytes = read_bounded(&mut r, limit, hint).expect("read");
        assert_eq!((bytes.len(), r.1), (limit + 1, limit + 1));
        assert!(bytes.capacity() <= limit + 1, "{} for {limit}", bytes.capacity());
    }
    let bytes = read_bounded(&mut &b"short"[..], 1000, None).expect("read");
    assert_eq!(bytes, b"short");
}

#[test]
fn info_says_whether_urls_are_fetched_and_within_what() {
    assert_eq!(Fetcher::info(None), json!({ "fetched": false }));
    let f = fetcher(ServerConfig::default().with_image_url_hosts(["A.example"]));
    let info = Fetcher::info(Some(&f));
    assert_eq!(info["max_bytes"], 4 << 20);
    assert_eq!(info["timeout_s"], 10.0);
    assert_eq!(info["hosts"], json!(["a.example"]));
    assert_eq!(Fetcher::info(Some(&fetcher(ServerConfig::default())))["hosts"], "any");
}
