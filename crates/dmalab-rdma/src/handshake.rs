//! The TCP handshake that connects a client's RC queue pair to a server's.
//!
//! One TCP connection per queue pair, held open for the QP's life. The
//! client sends a [`Hello`], the server answers with an [`Accept`] (or a
//! refusal with a reason), both move their QPs to RTS, and when the client
//! is done it sends a [`Done`] with what it moved and closes. Every message
//! starts with [`MAGIC`], a version and a kind; every field is checked on
//! receipt, and anything wrong is a clear [`RdmaError::Peer`], never a panic.
//!
//! Wire format (big-endian), the 64-byte endpoint message:
//! `magic[8] version:u16 kind:u8 link_layer:u8 qp_num:u32 psn:u32 lid:u16
//! mtu:u8 rd_atomic:u8 gid[16] addr:u64 len:u64 rkey:u32 msg_bytes:u32`.
//! `rd_atomic` is the READ depth: in a hello, the RDMA READs the client's
//! QP would keep outstanding (its device's `max_qp_init_rd_atom`); in an
//! accept, what the server's QP serves (the smaller of that and its
//! device's `max_qp_rd_atom`), which the client then uses. A server's
//! info (the answer to a query) ends with its device's READ depth, so a
//! client knows it before it connects.
//! A refusal is the header with kind 3 followed by `len:u16` and that many
//! bytes of UTF-8 reason; a done message is the header with kind 4 followed
//! by four u64: writes, reads, bytes written, bytes read.
//!
//! A server with a shared secret answers the client's opening (hello or
//! query) with a challenge (kind 7, 32 random bytes); the client answers
//! with its proof (kind 8, HMAC-SHA256 of the secret over the challenge and
//! its opening, [`crate::access::Secret::proof`]) before the server says
//! anything else. A client's hello carries no address, length or rkey of
//! its own buffer: the server initiates nothing, so it needs none.

use crate::access::{self, Secret, PROOF_LEN};
use crate::error::RdmaError;
use std::io::{Read, Write};

/// The first bytes of every message.
pub const MAGIC: [u8; 8] = *b"DMALABRD";
/// The protocol version this build speaks (2: endpoints and the server's
/// info carry the READ depth).
pub const VERSION: u16 = 2;
/// Bytes of an endpoint message.
pub const MSG_LEN: usize = 64;
/// Longest refusal reason accepted.
pub const MAX_REASON: usize = 1024;

const KIND_HELLO: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_REFUSE: u8 = 3;
const KIND_DONE: u8 = 4;
const KIND_QUERY: u8 = 5;
const KIND_INFO: u8 = 6;
const KIND_CHALLENGE: u8 = 7;
const KIND_PROOF: u8 = 8;

/// One side's queue pair and buffer, as the peer needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// 1 InfiniBand, 2 Ethernet (RoCE).
    pub link_layer: u8,
    /// QP number (24 bits).
    pub qp_num: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Active path MTU (`enum ibv_mtu`, 1 = 256 B .. 5 = 4096 B).
    pub mtu: u8,
    /// The port's GID at the chosen index.
    pub gid: [u8; 16],
    /// Buffer address (the server's; the client's is informational).
    pub addr: u64,
    /// Buffer length, bytes.
    pub len: u64,
    /// The buffer's remote key.
    pub rkey: u32,
    /// Largest message the client will issue, bytes (0 from the server).
    pub msg_bytes: u32,
    /// RDMA READs outstanding per QP (1..=255): asked for in a hello,
    /// granted in an accept.
    pub rd_atomic: u8,
}

/// What a client moved on one connection (sent before it closes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// RDMA WRITEs completed.
    pub writes: u64,
    /// RDMA READs completed.
    pub reads: u64,
    /// Bytes the WRITEs moved.
    pub write_bytes: u64,
    /// Bytes the READs moved.
    pub read_bytes: u64,
}

fn header(kind: u8) -> Vec<u8> {
    let mut b = Vec::with_capacity(MSG_LEN);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.push(kind);
    b
}

/// Encodes an endpoint message of `kind`.
fn encode(kind: u8, e: &Endpoint) -> [u8; MSG_LEN] {
    let mut b = header(kind);
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
    let mut out = [0u8; MSG_LEN];
    out.copy_from_slice(&b);
    out
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Checks magic and version of a received header (the first 11 bytes).
fn check_header(peer: &str, b: &[u8; 11]) -> Result<u8, RdmaError> {
    if b[..8] != MAGIC {
        return Err(peer_err(
            peer,
            format!(
                "is not a dmalab rdma peer (its first bytes are {:?}, expected \"DMALABRD\"): \
                 point --target at a `dmalab rdma serve`",
                String::from_utf8_lossy(&b[..8])
            ),
        ));
    }
    let version = be_u16(b, 8);
    if version != VERSION {
        return Err(peer_err(
            peer,
            format!(
                "speaks dmalab rdma protocol version {version}, this dmalab speaks {VERSION}: \
                 run the same dmalab version on both hosts"
            ),
        ));
    }
    Ok(b[10])
}

fn peer_err(peer: &str, message: impl Into<String>) -> RdmaError {
    RdmaError::Peer {
        peer: peer.to_string(),
        message: message.into(),
    }
}

/// Decodes and checks the body of an endpoint message (after the header).
fn decode_endpoint(peer: &str, b: &[u8]) -> Result<Endpoint, RdmaError> {
    // b is the whole 64-byte message.
    let e = Endpoint {
        link_layer: b[11],
        qp_num: be_u32(b, 12),
        psn: be_u32(b, 16),
        lid: be_u16(b, 20),
        mtu: b[22],
        gid: {
            let mut g = [0u8; 16];
            g.copy_from_slice(&b[24..40]);
            g
        },
        addr: be_u64(b, 40),
        len: be_u64(b, 48),
        rkey: be_u32(b, 56),
        msg_bytes: be_u32(b, 60),
        rd_atomic: b[23],
    };
    let bad = |m: String| Err(peer_err(peer, m));
    if e.link_layer != 1 && e.link_layer != 2 {
        return bad(format!(
            "sent link layer {} (expected 1 InfiniBand or 2 Ethernet)",
            e.link_layer
        ));
    }
    if e.qp_num == 0 || e.qp_num > 0xFF_FFFF {
        return bad(format!(
            "sent QP number {} (must be 1..=0xffffff)",
            e.qp_num
        ));
    }
    if e.psn > 0xFF_FFFF {
        return bad(format!("sent PSN {} (must fit 24 bits)", e.psn));
    }
    if !(1..=5).contains(&e.mtu) {
        return bad(format!(
            "sent MTU code {} (must be 1..=5, 256..4096 bytes)",
            e.mtu
        ));
    }
    if e.rd_atomic == 0 {
        return bad("sent a READ depth of 0 (must be 1..=255)".into());
    }
    if e.link_layer == 1 && e.lid == 0 && e.gid == [0; 16] {
        return bad("sent neither a LID nor a GID (InfiniBand port not configured?)".into());
    }
    if e.link_layer == 2 && e.gid == [0; 16] {
        return bad("sent an all-zero GID on RoCE (a GID index without an address)".into());
    }
    if e.addr.checked_add(e.len).is_none() {
        return bad(format!(
            "sent a buffer at {:#x} of {} bytes that wraps the address space",
            e.addr, e.len
        ));
    }
    Ok(e)
}

fn read_exact(peer: &str, s: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), RdmaError> {
    s.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            peer_err(
                peer,
                format!("closed the connection during the handshake ({what})"),
            )
        } else {
            RdmaError::io(format!("reading {what} from {peer}"), e)
        }
    })
}

/// Reads one message: the header, then its kind's body.
enum Msg {
    Endpoint(u8, Endpoint),
    Refuse(String),
    Done(Done),
    Query,
    Info(ServerInfo),
    Challenge([u8; PROOF_LEN]),
    Proof([u8; PROOF_LEN]),
}

/// What a server says about itself when asked (before any QP exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// 1 InfiniBand, 2 Ethernet (RoCE).
    pub link_layer: u8,
    /// Bytes of the served buffer.
    pub buffer_bytes: u64,
    /// RDMA READs the server's QPs serve at once, at most (its device's
    /// `max_qp_rd_atom`, 1..=255).
    pub max_rd_atomic: u8,
}

/// What a client opens a connection with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// A QP to connect.
    Hello(Endpoint),
    /// A question about the server (then the connection closes).
    Query,
}

fn read_msg(peer: &str, s: &mut impl Read, what: &str) -> Result<Msg, RdmaError> {
    let mut h = [0u8; 11];
    read_exact(peer, s, &mut h, what)?;
    let kind = check_header(peer, &h)?;
    match kind {
        KIND_HELLO | KIND_ACCEPT => {
            let mut b = [0u8; MSG_LEN];
            b[..11].copy_from_slice(&h);
            read_exact(peer, s, &mut b[11..], what)?;
            Ok(Msg::Endpoint(kind, decode_endpoint(peer, &b)?))
        }
        KIND_REFUSE => {
            let mut l = [0u8; 2];
            read_exact(peer, s, &mut l, "refusal")?;
            let n = u16::from_be_bytes(l) as usize;
            if n > MAX_REASON {
                return Err(peer_err(
                    peer,
                    format!("sent a {n}-byte refusal (at most {MAX_REASON})"),
                ));
            }
            let mut r = vec![0u8; n];
            read_exact(peer, s, &mut r, "refusal")?;
            Ok(Msg::Refuse(String::from_utf8_lossy(&r).into_owned()))
        }
        KIND_DONE => {
            let mut b = [0u8; 32];
            read_exact(peer, s, &mut b, "done message")?;
            Ok(Msg::Done(Done {
                writes: be_u64(&b, 0),
                reads: be_u64(&b, 8),
                write_bytes: be_u64(&b, 16),
                read_bytes: be_u64(&b, 24),
            }))
        }
        KIND_QUERY => Ok(Msg::Query),
        KIND_INFO => {
            let mut b = [0u8; 10];
            read_exact(peer, s, &mut b, "server info")?;
            let link_layer = b[0];
            if link_layer != 1 && link_layer != 2 {
                return Err(peer_err(
                    peer,
                    format!("sent link layer {link_layer} (expected 1 InfiniBand or 2 Ethernet)"),
                ));
            }
            if b[9] == 0 {
                return Err(peer_err(peer, "sent a READ depth of 0 (must be 1..=255)"));
            }
            Ok(Msg::Info(ServerInfo {
                link_layer,
                buffer_bytes: be_u64(&b, 1),
                max_rd_atomic: b[9],
            }))
        }
        KIND_CHALLENGE | KIND_PROOF => {
            let mut b = [0u8; PROOF_LEN];
            read_exact(peer, s, &mut b, "challenge")?;
            Ok(if kind == KIND_CHALLENGE {
                Msg::Challenge(b)
            } else {
                Msg::Proof(b)
            })
        }
        k => Err(peer_err(
            peer,
            format!("sent message kind {k} (expected 1..=8)"),
        )),
    }
}

fn write_all(peer: &str, s: &mut impl Write, b: &[u8], what: &str) -> Result<(), RdmaError> {
    s.write_all(b)
        .and_then(|_| s.flush())
        .map_err(|e| RdmaError::io(format!("sending {what} to {peer}"), e))
}

/// Client side: sends `hello`, returns the server's endpoint (checked: the
/// same link layer, a buffer at least one message long) or its refusal.
pub fn client<S: Read + Write>(
    peer: &str,
    s: &mut S,
    hello: &Endpoint,
    secret: Option<&Secret>,
) -> Result<Endpoint, RdmaError> {
    let opening = encode(KIND_HELLO, hello);
    write_all(peer, s, &opening, "hello")?;
    let first = read_msg(peer, s, "the server's answer")?;
    match answer_challenge(peer, s, secret, &opening, first)? {
        Msg::Endpoint(KIND_ACCEPT, e) => {
            if e.link_layer != hello.link_layer {
                return Err(peer_err(
                    peer,
                    format!(
                        "is on link layer {} and this host on {}: InfiniBand and RoCE ports cannot connect",
                        e.link_layer, hello.link_layer
                    ),
                ));
            }
            if e.len < u64::from(hello.msg_bytes) {
                return Err(peer_err(
                    peer,
                    format!(
                        "offers a {}-byte buffer, smaller than one {}-byte message: \
                         give the server a larger --buffer or use a smaller message",
                        e.len, hello.msg_bytes
                    ),
                ));
            }
            Ok(e)
        }
        Msg::Refuse(r) => Err(peer_err(peer, format!("refused the connection: {r}"))),
        Msg::Endpoint(k, _) => Err(peer_err(
            peer,
            format!("answered with message kind {k} (expected 2, accept)"),
        )),
        _ => Err(peer_err(
            peer,
            "answered with a message of the wrong kind (expected 2, accept)",
        )),
    }
}

/// Client side: when the server's first answer is a challenge, proves
/// knowledge of the secret and returns the answer after that.
fn answer_challenge<S: Read + Write>(
    peer: &str,
    s: &mut S,
    secret: Option<&Secret>,
    opening: &[u8],
    first: Msg,
) -> Result<Msg, RdmaError> {
    let Msg::Challenge(c) = first else {
        return Ok(first);
    };
    let Some(secret) = secret else {
        return Err(peer_err(
            peer,
            "asks for a shared secret: give --rdma-secret-file FILE holding the secret of its \
             --secret-file",
        ));
    };
    let mut b = header(KIND_PROOF);
    b.extend_from_slice(&secret.proof(&c, opening));
    write_all(peer, s, &b, "proof")?;
    match read_msg(peer, s, "the server's answer")? {
        Msg::Challenge(_) => Err(peer_err(peer, "sent a second challenge")),
        m => Ok(m),
    }
}

/// Client side: asks the server about itself (no QP is made).
pub fn query<S: Read + Write>(
    peer: &str,
    s: &mut S,
    secret: Option<&Secret>,
) -> Result<ServerInfo, RdmaError> {
    let opening = header(KIND_QUERY);
    write_all(peer, s, &opening, "query")?;
    let first = read_msg(peer, s, "the server's answer")?;
    match answer_challenge(peer, s, secret, &opening, first)? {
        Msg::Info(i) => Ok(i),
        Msg::Refuse(r) => Err(peer_err(peer, format!("refused the query: {r}"))),
        _ => Err(peer_err(
            peer,
            "answered a query with a message of the wrong kind (expected 6, info)",
        )),
    }
}

/// Server side: answers a query.
pub fn server_info<W: Write>(peer: &str, s: &mut W, info: &ServerInfo) -> Result<(), RdmaError> {
    let mut b = header(KIND_INFO);
    b.push(info.link_layer);
    b.extend_from_slice(&info.buffer_bytes.to_be_bytes());
    b.push(info.max_rd_atomic);
    write_all(peer, s, &b, "server info")
}

/// Client side: reports what it moved before closing.
pub fn send_done<W: Write>(peer: &str, s: &mut W, done: &Done) -> Result<(), RdmaError> {
    let mut b = header(KIND_DONE);
    for v in [done.writes, done.reads, done.write_bytes, done.read_bytes] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    write_all(peer, s, &b, "done message")
}

/// Server side, first step: reads and checks the client's opening.
pub fn server_read_opening<R: Read>(peer: &str, s: &mut R) -> Result<Opening, RdmaError> {
    match read_msg(peer, s, "hello")? {
        Msg::Endpoint(KIND_HELLO, e) => Ok(Opening::Hello(e)),
        Msg::Query => Ok(Opening::Query),
        Msg::Endpoint(k, _) => Err(peer_err(
            peer,
            format!("sent message kind {k} first (expected 1, hello)"),
        )),
        Msg::Refuse(_) => Err(peer_err(
            peer,
            "sent message kind 3 first (expected 1, hello)",
        )),
        _ => Err(peer_err(
            peer,
            "sent a message of the wrong kind first (expected 1, hello)",
        )),
    }
}

/// The bytes of a client's opening, as it sent them (every field of a
/// hello was checked on receipt, so encoding it again gives them back).
fn opening_bytes(o: &Opening) -> Vec<u8> {
    match o {
        Opening::Hello(e) => encode(KIND_HELLO, e).to_vec(),
        Opening::Query => header(KIND_QUERY),
    }
}

/// Server side, after the opening when serving with a secret: challenges
/// the client and checks its proof (in constant time); a wrong or missing
/// proof is refused and returned as the peer's error.
pub fn server_authenticate<S: Read + Write>(
    peer: &str,
    s: &mut S,
    secret: &Secret,
    opening: &Opening,
) -> Result<(), RdmaError> {
    let c = access::challenge().map_err(|e| RdmaError::io("getrandom for a challenge", e))?;
    let mut b = header(KIND_CHALLENGE);
    b.extend_from_slice(&c);
    write_all(peer, s, &b, "challenge")?;
    let why = match read_msg(peer, s, "proof")? {
        Msg::Proof(p) if secret.verify(&c, &opening_bytes(opening), &p) => return Ok(()),
        Msg::Proof(_) => "proved no knowledge of the shared secret (its proof is wrong)",
        _ => "answered the challenge with a message of the wrong kind (expected 8, proof)",
    };
    let _ = server_refuse(
        peer,
        s,
        "the shared secret does not match: give --rdma-secret-file the file this server's \
         --secret-file names",
    );
    Err(peer_err(peer, why))
}

/// Server side: accepts with the server's endpoint.
pub fn server_accept<W: Write>(peer: &str, s: &mut W, ours: &Endpoint) -> Result<(), RdmaError> {
    write_all(peer, s, &encode(KIND_ACCEPT, ours), "accept")
}

/// Server side: refuses with a reason (cut to [`MAX_REASON`] bytes).
pub fn server_refuse<W: Write>(peer: &str, s: &mut W, reason: &str) -> Result<(), RdmaError> {
    let mut r = reason.as_bytes();
    if r.len() > MAX_REASON {
        r = &r[..MAX_REASON];
    }
    let mut b = header(KIND_REFUSE);
    b.extend_from_slice(&(r.len() as u16).to_be_bytes());
    b.extend_from_slice(r);
    write_all(peer, s, &b, "refusal")
}

/// Server side, last step: waits for the client's done message or its
/// close. `Ok(None)`: closed without one (a client that died).
pub fn server_wait_done<R: Read>(peer: &str, s: &mut R) -> Result<Option<Done>, RdmaError> {
    let mut first = [0u8; 1];
    match s.read(&mut first) {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(RdmaError::io(format!("reading from {peer}"), e)),
    }
    match read_msg(peer, &mut (&first[..]).chain(&mut *s), "done message")? {
        Msg::Done(d) => Ok(Some(d)),
        Msg::Endpoint(k, _) => Err(peer_err(
            peer,
            format!("sent message kind {k} (expected 4, done)"),
        )),
        _ => Err(peer_err(
            peer,
            "sent a message of the wrong kind (expected 4, done)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn ep(qp: u32) -> Endpoint {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[127, 0, 0, 1]);
        Endpoint {
            link_layer: 2,
            qp_num: qp,
            psn: 0x123456,
            lid: 0,
            mtu: 5,
            gid,
            addr: 0x7f00_0000_0000,
            len: 1 << 20,
            rkey: 0xabcd,
            msg_bytes: 65536,
            rd_atomic: 128,
        }
    }

    #[test]
    fn an_endpoint_survives_the_wire() {
        let e = ep(17);
        let b = encode(KIND_HELLO, &e);
        assert_eq!(b.len(), MSG_LEN);
        assert_eq!(decode_endpoint("p", &b).unwrap(), e);
    }

    /// A fake server on loopback: the real client against hand-made answers.
    fn fake_server(answer: Vec<u8>) -> (String, std::thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut hello = [0u8; MSG_LEN];
            s.read_exact(&mut hello).unwrap();
            s.write_all(&answer).unwrap();
            hello.to_vec()
        });
        (addr, h)
    }

    fn run_client(answer: Vec<u8>, hello: &Endpoint) -> Result<Endpoint, RdmaError> {
        let (addr, h) = fake_server(answer);
        let mut s = TcpStream::connect(&addr).unwrap();
        let r = client(&addr, &mut s, hello, None);
        let sent = h.join().unwrap();
        assert_eq!(&sent[..8], b"DMALABRD");
        r
    }

    #[test]
    fn the_client_takes_a_good_accept() {
        let theirs = ep(99);
        let got = run_client(encode(KIND_ACCEPT, &theirs).to_vec(), &ep(5)).unwrap();
        assert_eq!(got, theirs);
    }

    #[test]
    fn a_peer_of_another_version_is_refused_by_name() {
        let mut b = encode(KIND_ACCEPT, &ep(99));
        b[8..10].copy_from_slice(&1u16.to_be_bytes());
        let e = run_client(b.to_vec(), &ep(5)).unwrap_err().to_string();
        assert!(
            e.contains("protocol version 1, this dmalab speaks 2"),
            "{e}"
        );
    }

    #[test]
    fn a_peer_of_another_protocol_is_refused() {
        let e = run_client(b"HTTP/1.1 400 Bad Request\r\n\r\n".repeat(3), &ep(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a dmalab rdma peer"), "{e}");
    }

    #[test]
    fn every_endpoint_field_is_checked() {
        type Spoil = Box<dyn Fn(&mut Endpoint)>;
        let cases: Vec<(Spoil, &str)> = vec![
            (Box::new(|e| e.link_layer = 7), "link layer 7"),
            (Box::new(|e| e.qp_num = 0), "QP number 0"),
            (Box::new(|e| e.qp_num = 1 << 24), "QP number"),
            (Box::new(|e| e.psn = 1 << 24), "PSN"),
            (Box::new(|e| e.mtu = 0), "MTU code 0"),
            (Box::new(|e| e.mtu = 6), "MTU code 6"),
            (Box::new(|e| e.gid = [0; 16]), "all-zero GID"),
            (Box::new(|e| e.addr = u64::MAX), "wraps"),
        ];
        for (f, want) in cases {
            let mut e = ep(3);
            f(&mut e);
            let got = decode_endpoint("p", &encode(KIND_ACCEPT, &e))
                .unwrap_err()
                .to_string();
            assert!(got.contains(want), "{got} lacks {want}");
        }
        // The READ depth travels in byte 23 (the reserved byte of
        // version 1), and 0 is refused.
        let mut b = encode(KIND_ACCEPT, &ep(3));
        assert_eq!(b[23], 128);
        b[23] = 0;
        assert!(decode_endpoint("p", &b)
            .unwrap_err()
            .to_string()
            .contains("READ depth of 0"));
    }

    #[test]
    fn a_remote_buffer_smaller_than_one_message_is_refused() {
        let mut theirs = ep(99);
        theirs.len = 4096;
        let e = run_client(encode(KIND_ACCEPT, &theirs).to_vec(), &ep(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("smaller than one 65536-byte message"), "{e}");
    }

    #[test]
    fn a_link_layer_mismatch_is_refused() {
        let mut theirs = ep(99);
        theirs.link_layer = 1;
        theirs.lid = 3;
        let e = run_client(encode(KIND_ACCEPT, &theirs).to_vec(), &ep(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("InfiniBand and RoCE"), "{e}");
    }

    #[test]
    fn a_refusal_reaches_the_client_with_its_reason() {
        let mut s = std::io::Cursor::new(Vec::new());
        server_refuse("p", &mut s, "no QPs left").unwrap();
        let e = run_client(s.into_inner(), &ep(5)).unwrap_err().to_string();
        assert!(e.contains("refused the connection: no QPs left"), "{e}");
    }

    #[test]
    fn a_peer_that_hangs_up_is_an_error_not_a_panic() {
        for cut in [0, 5, 11, 30] {
            let b = encode(KIND_ACCEPT, &ep(99))[..cut].to_vec();
            let e = run_client(b, &ep(5)).unwrap_err().to_string();
            assert!(e.contains("closed the connection"), "{cut}: {e}");
        }
    }

    #[test]
    fn the_server_reads_hello_and_done() {
        let mut wire = encode(KIND_HELLO, &ep(8)).to_vec();
        let done = Done {
            writes: 3,
            reads: 4,
            write_bytes: 5,
            read_bytes: 6,
        };
        send_done("p", &mut wire, &done).unwrap();
        let mut r = std::io::Cursor::new(wire);
        assert_eq!(
            server_read_opening("p", &mut r).unwrap(),
            Opening::Hello(ep(8))
        );
        assert_eq!(server_wait_done("p", &mut r).unwrap(), Some(done));
        assert_eq!(server_wait_done("p", &mut r).unwrap(), None);
    }

    #[test]
    fn the_server_refuses_an_accept_as_hello() {
        let mut r = std::io::Cursor::new(encode(KIND_ACCEPT, &ep(8)).to_vec());
        let e = server_read_opening("p", &mut r).unwrap_err().to_string();
        assert!(e.contains("expected 1, hello"), "{e}");
    }

    #[test]
    fn a_query_gets_the_served_size() {
        let info = ServerInfo {
            link_layer: 2,
            buffer_bytes: 4096,
            max_rd_atomic: 7,
        };
        let mut answer = Vec::new();
        server_info("p", &mut answer, &info).unwrap();
        let (addr, h) = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let h = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let got = server_read_opening("c", &mut s).unwrap();
                s.write_all(&answer).unwrap();
                got
            });
            (addr, h)
        };
        let mut s = TcpStream::connect(&addr).unwrap();
        assert_eq!(query(&addr, &mut s, None).unwrap(), info);
        assert_eq!(h.join().unwrap(), Opening::Query);
    }

    #[test]
    fn garbage_never_panics() {
        // Every prefix and a few byte flips of a valid stream.
        let mut wire = encode(KIND_HELLO, &ep(8)).to_vec();
        send_done("p", &mut wire, &Done::default()).unwrap();
        for cut in 0..wire.len() {
            let _ = server_read_opening("p", &mut std::io::Cursor::new(&wire[..cut]));
        }
        for i in 0..wire.len() {
            let mut w = wire.clone();
            w[i] ^= 0xa5;
            let mut r = std::io::Cursor::new(w);
            let _ = server_read_opening("p", &mut r).and_then(|_| server_wait_done("p", &mut r));
        }
    }
}
