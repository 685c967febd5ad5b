//! Who may connect to `dmalab rdma serve`: a shared secret the client
//! proves it knows ([`Secret`], `--secret-file` / `--rdma-secret-file`) and
//! a list of peer networks ([`AllowNet`], `--allow`).
//!
//! The proof is HMAC-SHA256 of the secret over a fresh 32-byte challenge
//! from the server and the client's opening message, compared in constant
//! time: the secret never crosses the wire, a recorded proof is useless for
//! another connection (another challenge), and a proof cannot be moved to
//! another hello (it covers the hello's bytes).

use dmalab_core::UsageError;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::str::FromStr;

/// Bytes of a challenge and of a proof.
pub const PROOF_LEN: usize = 32;
/// Shortest secret accepted, bytes.
pub const MIN_SECRET: usize = 16;
/// Longest secret file read, bytes.
pub const MAX_SECRET: u64 = 4096;

/// A shared secret (never printed: its `Debug` says only its length).
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// Reads the secret from `path` for `flag`: a regular file (not a
    /// symlink, FIFO or device) owned by this user and readable by no one
    /// else (mode 0600 or 0400), 16 to 4096 bytes; one trailing newline is
    /// not part of it.
    pub fn read(path: &Path, flag: &str) -> Result<Secret, UsageError> {
        let fix = "create it with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`";
        let bad = |what: String| UsageError::new(flag, format!("{}: {what}", path.display()));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            // Not through a symlink someone planted; a FIFO does not block.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    bad("is a symbolic link: name the file itself".into())
                } else {
                    bad(format!("cannot be read ({e}): {fix}"))
                }
            })?;
        let m = f
            .metadata()
            .map_err(|e| bad(format!("cannot be examined ({e})")))?;
        if !m.file_type().is_file() {
            return Err(bad("is not a regular file".into()));
        }
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if m.uid() != me {
            return Err(bad(format!(
                "is owned by uid {}, not by this user (uid {me}): another user could read or \
                 change it; {fix}",
                m.uid()
            )));
        }
        if m.mode() & 0o077 != 0 {
            return Err(bad(format!(
                "has mode {:04o}: group and others may read it; `chmod 600` it",
                m.mode() & 0o7777
            )));
        }
        if m.len() > MAX_SECRET {
            return Err(bad(format!(
                "is {} bytes; a secret is at most {MAX_SECRET}",
                m.len()
            )));
        }
        let mut b = Vec::new();
        (&mut f)
            .take(MAX_SECRET + 1)
            .read_to_end(&mut b)
            .map_err(|e| bad(format!("cannot be read ({e})")))?;
        if b.last() == Some(&b'\n') {
            b.pop();
            if b.last() == Some(&b'\r') {
                b.pop();
            }
        }
        if b.len() < MIN_SECRET {
            return Err(bad(format!(
                "holds {} bytes; a secret has at least {MIN_SECRET}: {fix}",
                b.len()
            )));
        }
        Ok(Secret(b))
    }

    /// A secret from bytes (tests).
    pub fn from_bytes(b: &[u8]) -> Secret {
        Secret(b.to_vec())
    }

    /// The proof for `challenge` and the client's `opening` bytes.
    pub fn proof(&self, challenge: &[u8; PROOF_LEN], opening: &[u8]) -> [u8; PROOF_LEN] {
        let mut msg = Vec::with_capacity(16 + PROOF_LEN + opening.len());
        msg.extend_from_slice(b"dmalab-rdma-v1\0");
        msg.extend_from_slice(challenge);
        msg.extend_from_slice(opening);
        hmac_sha256(&self.0, &msg)
    }

    /// True when `proof` is the proof for `challenge` and `opening`
    /// (compared in constant time).
    pub fn verify(&self, challenge: &[u8; PROOF_LEN], opening: &[u8], proof: &[u8]) -> bool {
        ct_eq(&self.proof(challenge, opening), proof)
    }
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Equal bytes, in time that depends only on the lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    // The fold is not cut short; black_box keeps it from being.
    std::hint::black_box(diff) == 0
}

/// A fresh random challenge (getrandom(2)).
pub fn challenge() -> std::io::Result<[u8; PROOF_LEN]> {
    let mut c = [0u8; PROOF_LEN];
    let mut got = 0;
    while got < PROOF_LEN {
        // SAFETY: writes at most PROOF_LEN - got bytes into c from got on.
        let n = unsafe { libc::getrandom(c[got..].as_mut_ptr().cast(), PROOF_LEN - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(c)
}

/// `--allow ADDR[/PREFIX]`: a peer network that may connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllowNet {
    /// The network's address.
    pub addr: IpAddr,
    /// Leading bits that must match (32 or 128 for one address).
    pub prefix: u8,
}

impl FromStr for AllowNet {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        let bad = || {
            UsageError::new(
                "--allow",
                format!(
                    "{s:?} is not ADDR or ADDR/PREFIX (e.g. 192.0.2.7 or 10.0.0.0/8, fd00::/8)"
                ),
            )
        };
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(bad()),
            },
        };
        Ok(AllowNet { addr, prefix })
    }
}

impl AllowNet {
    /// True when `peer` lies in this network (an IPv4-mapped IPv6 peer is
    /// taken as its IPv4 address).
    pub fn contains(&self, peer: IpAddr) -> bool {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(peer),
            v4 => v4,
        };
        let bits = |a: IpAddr| -> u128 {
            match a {
                IpAddr::V4(v) => u128::from(u32::from(v)) << 96,
                IpAddr::V6(v) => u128::from(v),
            }
        };
        if peer.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        if self.prefix == 0 {
            return true;
        }
        let shift = 128 - u32::from(self.prefix);
        let mask = if shift >= 128 { 0 } else { u128::MAX << shift };
        bits(peer) & mask == bits(self.addr) & mask
    }
}

impl std::fmt::Display for AllowNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// RFC 4231 test cases 1 and 2.
    #[test]
    fn hmac_matches_rfc_4231() {
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Case 6: a key longer than the block is hashed first.
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_proof_holds_for_its_challenge_and_hello_only() {
        let s = Secret::from_bytes(b"0123456789abcdef0123");
        let c = [7u8; PROOF_LEN];
        let p = s.proof(&c, b"hello");
        assert!(s.verify(&c, b"hello", &p));
        assert!(!s.verify(&[8u8; PROOF_LEN], b"hello", &p));
        assert!(!s.verify(&c, b"hellp", &p));
        assert!(!Secret::from_bytes(b"another secret 123").verify(&c, b"hello", &p));
        assert!(!s.verify(&c, b"hello", &p[..31]));
        assert_ne!(challenge().unwrap(), challenge().unwrap());
    }

    #[test]
    fn a_secret_file_must_be_ours_private_and_long_enough() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = Secret::read(&p, "--secret-file").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(20 bytes)");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secret::read(&p, "--secret-file").unwrap_err();
        assert!(e.message.contains("has mode 0644"), "{}", e.message);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        let e = Secret::read(&l, "--secret-file").unwrap_err();
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        std::fs::write(&p, "short\n").unwrap();
        let e = Secret::read(&p, "--secret-file").unwrap_err();
        assert!(e.message.contains("at least 16"), "{}", e.message);
        let e = Secret::read(d.path(), "--secret-file").unwrap_err();
        assert_eq!(e.option, "--secret-file");
    }

    #[test]
    fn allow_nets_parse_and_match() {
        let n: AllowNet = "10.0.0.0/8".parse().unwrap();
        assert!(n.contains("10.9.8.7".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        let one: AllowNet = "127.0.0.1".parse().unwrap();
        assert_eq!(one.prefix, 32);
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let any: AllowNet = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("192.0.2.1".parse().unwrap()));
        assert!(!any.contains("::1".parse().unwrap()));
        let v6: AllowNet = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "host", "10.0.0.0/", "::/129", ""] {
            assert_eq!(
                bad.parse::<AllowNet>().unwrap_err().option,
                "--allow",
                "{bad}"
            );
        }
    }
}
