//! A `dmalab rdma serve` on the fake verbs library
//! (`DMALAB_IBVERBS_LIB=mock`, `dmalab_rdma::mock`) and byte-level peers
//! for it, on loopback, with no RDMA device: for the serve tests
//! (`tests/rdma_serve.rs`) and the fuzz harness.

use dmalab_rdma::access::Secret;
use dmalab_rdma::handshake::{self, Done, Endpoint, MAGIC, MSG_LEN};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest any wait of these tests lasts before it fails (a hang bound,
/// not a timing assertion).
pub const HANG: Duration = Duration::from_secs(60);

/// A `dmalab rdma serve` on the fake verbs library, listening on a port
/// of loopback the kernel chose.
pub struct Serve {
    child: Child,
    lines: Receiver<String>,
    log: Arc<Mutex<Vec<String>>>,
    /// HOST:PORT it listens on.
    pub addr: String,
}

impl Serve {
    /// Starts it with `extra` flags and waits for its "serving" line.
    pub fn start(extra: &[&str]) -> Serve {
        Serve::start_on("mock", extra)
    }

    /// [`Serve::start`] on the fake library as `mock_spec` configures it
    /// (`mock:rd_atom=4`: a device that serves 4 READs at once per QP).
    pub fn start_on(mock_spec: &str, extra: &[&str]) -> Serve {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("dmalab"))
            .args(["rdma", "serve", "--listen", "127.0.0.1:0", "--buffer", "1M"])
            .args(extra)
            .env("DMALAB_IBVERBS_LIB", mock_spec)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dmalab runs");
        let err = child.stderr.take().expect("stderr piped");
        let (tx, lines) = std::sync::mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let keep = log.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(l.clone());
                let _ = tx.send(l);
            }
        });
        let mut s = Serve {
            child,
            lines,
            log,
            addr: String::new(),
        };
        let first = s.wait_line("serving ");
        s.addr = first
            .rsplit_once(" at ")
            .map(|(_, a)| a.trim().to_string())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        s
    }

    /// Waits for a stderr line containing `what` (fails after [`HANG`]).
    pub fn wait_line(&mut self, what: &str) -> String {
        loop {
            match self.lines.recv_timeout(HANG) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no line with {what:?} in {:?}", self.log())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.kill();
                    panic!("serve ended without {what:?}: {:?}", self.log())
                }
            }
        }
    }

    /// Every stderr line so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits for it to end (killing it and failing after [`HANG`]):
    /// its exit status and stdout.
    pub fn finish(mut self) -> (i32, String, Vec<String>) {
        let mut waited = Duration::ZERO;
        let st = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if waited > HANG {
                let _ = self.child.kill();
                panic!("serve did not end: {:?}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
            waited += Duration::from_millis(50);
        };
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        // The stderr reader ends with the pipe.
        std::thread::sleep(Duration::from_millis(100));
        use std::os::unix::process::ExitStatusExt;
        let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
        let log = self.log();
        (code, out, log)
    }

    /// SIGINT, then [`Serve::finish`]; asserts it ended the house way
    /// (130, no panic).
    pub fn stop(self) -> (String, Vec<String>) {
        self.signal(libc::SIGINT);
        let (code, out, log) = self.finish();
        assert_eq!(code, 130, "serve ends on SIGINT with 130: {log:?}");
        assert!(!log.iter().any(|l| l.contains("panicked")), "{log:?}");
        (out, log)
    }

    /// Connects to it (fails after [`HANG`] of silence on reads).
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect to serve");
        s.set_read_timeout(Some(HANG)).unwrap();
        s
    }
}

/// A valid client endpoint of the fake device (QP `qp`).
pub fn endpoint(qp: u32) -> Endpoint {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[127, 0, 0, 1]);
    Endpoint {
        link_layer: 2,
        qp_num: qp,
        psn: 0x1234,
        lid: 0,
        mtu: 5,
        gid,
        addr: 0,
        len: 0,
        rkey: 0,
        msg_bytes: 4096,
        rd_atomic: 16,
    }
}

/// A hello as bytes, laid out by hand (the wire format in
/// `dmalab_rdma::handshake`), so a test can spoil any byte of it.
pub fn hello_bytes(qp: u32) -> Vec<u8> {
    let e = endpoint(qp);
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&dmalab_rdma::handshake::VERSION.to_be_bytes());
    b.push(1); // hello
    b.push(e.link_layer);
    b.extend_from_slice(&e.qp_num.to_be_bytes());
    b.extend_from_slice(&e.psn.to_be_bytes());
    b.extend_from_slice(&e.lid.to_be_bytes());
    b.push(e.mtu);
    b.push(e.rd_atomic);
    b.extend_from_slice(&e.gid);
    b.extend_from_slice(&e.addr.to_be_bytes());
    b.extend_from_slice(&e.len.to_be_bytes());
    b.extend_from_slice(&e.rkey.to_be_bytes());
    b.extend_from_slice(&e.msg_bytes.to_be_bytes());
    assert_eq!(b.len(), MSG_LEN);
    b
}

/// A well-formed client: handshake, then a done message with `done`.
pub fn good_client(srv: &Serve, qp: u32, done: Done) -> Result<Endpoint, String> {
    good_client_with(srv, qp, done, None)
}

/// [`good_client`] that answers a challenge with `secret`.
pub fn good_client_with(
    srv: &Serve,
    qp: u32,
    done: Done,
    secret: Option<&Secret>,
) -> Result<Endpoint, String> {
    let mut s = srv.connect();
    let theirs =
        handshake::client(&srv.addr, &mut s, &endpoint(qp), secret).map_err(|e| e.to_string())?;
    handshake::send_done(&srv.addr, &mut s, &done).map_err(|e| e.to_string())?;
    Ok(theirs)
}

/// Reads what the server says until it closes (bounded by [`HANG`]).
pub fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
}
