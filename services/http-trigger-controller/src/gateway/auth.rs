//! Basic authentication against a Secret, in the formats ingress-nginx and Traefik read.
//!
//! * key `auth` (ingress-nginx) or `users` (Traefik): htpasswd lines `user:hash` with hash
//!   `{PLAIN}password`, `{SHA}base64(sha1)`, or `$apr1$salt$hash` (Apache MD5, what
//!   `htpasswd` writes by default). bcrypt (`$2y$`) and crypt(3) hashes are not supported:
//!   such lines never match, and a warning is logged when the Secret is loaded.
//! * keys `username` and `password` (type `kubernetes.io/basic-auth`): one user, plain.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use md5::{Digest as _, Md5};

/// A password check for one user.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hash {
    Plain(Vec<u8>),
    Sha1([u8; 20]),
    Apr1 { salt: String, encoded: String },
    Unsupported,
}

/// The users a Secret allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    users: Vec<(String, Hash)>,
    /// Lines that could not be used (reported once when loaded).
    pub unsupported: Vec<String>,
}

impl Credentials {
    /// Reads a Secret's data. `None` when it has none of the known keys.
    pub fn from_secret_data(data: &BTreeMap<String, ByteString>) -> Option<Self> {
        if let Some(file) = data.get("auth").or_else(|| data.get("users")) {
            return Some(Self::from_htpasswd(&String::from_utf8_lossy(&file.0)));
        }
        let user = data.get("username")?;
        let pass = data.get("password")?;
        Some(Self {
            users: vec![(
                String::from_utf8_lossy(&user.0).into_owned(),
                Hash::Plain(pass.0.clone()),
            )],
            unsupported: Vec::new(),
        })
    }

    /// Parses an htpasswd file.
    pub fn from_htpasswd(text: &str) -> Self {
        let mut c = Self::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                c.unsupported
                    .push(format!("line without ':' ({} chars)", line.len()));
                continue;
            };
            let parsed = parse_hash(hash);
            if parsed == Hash::Unsupported {
                c.unsupported
                    .push(format!("user {user}: unsupported hash format"));
            }
            c.users.push((user.to_string(), parsed));
        }
        c
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `user`/`password` is allowed.
    pub fn verify(&self, user: &str, password: &[u8]) -> bool {
        // Every entry for the user is checked (htpasswd allows duplicates; first match wins in
        // nginx, any match here: the same set of passwords is accepted).
        self.users
            .iter()
            .filter(|(u, _)| ct_eq(u.as_bytes(), user.as_bytes()))
            .any(|(_, h)| check(h, password))
    }

    /// Checks an `Authorization` header value (`Basic base64(user:password)`).
    pub fn verify_header(&self, header: &[u8]) -> bool {
        match decode_basic(header) {
            Some((user, password)) => self.verify(&user, &password),
            None => false,
        }
    }
}

/// Splits `Basic <base64>` into user and password.
pub fn decode_basic(header: &[u8]) -> Option<(String, Vec<u8>)> {
    let s = std::str::from_utf8(header).ok()?.trim();
    let (scheme, token) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = STANDARD.decode(token.trim()).ok()?;
    let at = raw.iter().position(|b| *b == b':')?;
    let user = String::from_utf8(raw[..at].to_vec()).ok()?;
    Some((user, raw[at + 1..].to_vec()))
}

fn parse_hash(h: &str) -> Hash {
    if let Some(p) = h.strip_prefix("{PLAIN}") {
        return Hash::Plain(p.as_bytes().to_vec());
    }
    if let Some(b64) = h.strip_prefix("{SHA}") {
        return match STANDARD
            .decode(b64.trim())
            .ok()
            .and_then(|v| <[u8; 20]>::try_from(v).ok())
        {
            Some(d) => Hash::Sha1(d),
            None => Hash::Unsupported,
        };
    }
    if let Some(rest) = h.strip_prefix("$apr1$")
        && let Some((salt, encoded)) = rest.split_once('$')
    {
        return Hash::Apr1 {
            salt: salt.to_string(),
            encoded: encoded.to_string(),
        };
    }
    Hash::Unsupported
}

fn check(h: &Hash, password: &[u8]) -> bool {
    match h {
        Hash::Plain(p) => ct_eq(p, password),
        Hash::Sha1(d) => ct_eq(d, &sha1_smol::Sha1::from(password).digest().bytes()),
        Hash::Apr1 { salt, encoded } => ct_eq(
            apr1_encode(password, salt.as_bytes()).as_bytes(),
            encoded.as_bytes(),
        ),
        Hash::Unsupported => false,
    }
}

/// Compares without an early exit on the first differing byte.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The hash part of Apache's `$apr1$` (MD5-crypt with the `$apr1$` magic): 1000 MD5 rounds
/// over password and salt, written in crypt's base-64 alphabet.
pub fn apr1_encode(password: &[u8], salt: &[u8]) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let salt = &salt[..salt.len().min(8)];

    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(MAGIC);
    ctx.update(salt);

    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let alt = alt.finalize();
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..password.len().min(1)]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();

    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(password);
        }
        fin = c.finalize();
    }

    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut put = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(char::from(ITOA64[(v & 0x3f) as usize]));
            v >>= 6;
        }
    };
    let f = |i: usize| u32::from(fin[i]);
    put((f(0) << 16) | (f(6) << 8) | f(12), 4);
    put((f(1) << 16) | (f(7) << 8) | f(13), 4);
    put((f(2) << 16) | (f(8) << 8) | f(14), 4);
    put((f(3) << 16) | (f(9) << 8) | f(15), 4);
    put((f(4) << 16) | (f(10) << 8) | f(5), 4);
    put(f(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, pass: &str) -> Vec<u8> {
        format!("Basic {}", STANDARD.encode(format!("{user}:{pass}"))).into_bytes()
    }

    // Vectors produced with `openssl passwd -apr1 -salt <salt> <password>` and
    // `printf %s <password> | openssl sha1 -binary | base64`.
    #[test]
    fn apr1_matches_openssl() {
        assert_eq!(
            apr1_encode(b"s3cret!", b"Zx9Q3pLm"),
            "gy6x49kIZzZDFQDfRR86Y/"
        );
        assert_eq!(apr1_encode(b"password", b"ab"), "vZXhMKiOqO1yMl8FLQFrs0");
        assert_eq!(apr1_encode(b"", b"12345678"), "sHuPAw7VA9xjRbJz7zKV7/");
    }

    #[test]
    fn htpasswd_formats() {
        let c = Credentials::from_htpasswd(
            "# comment\n\
             alice:$apr1$Zx9Q3pLm$gy6x49kIZzZDFQDfRR86Y/\n\
             bob:{SHA}YWXIkDPDfrJ6I4yV+0kqTJdT5SE=\n\
             carol:{PLAIN}pw\n\
             dave:$2y$05$abcdefghijklmnopqrstuu\n\
             \n",
        );
        assert_eq!(c.len(), 4);
        assert!(c.verify("alice", b"s3cret!"));
        assert!(!c.verify("alice", b"s3cret"));
        assert!(c.verify("bob", b"s3cret!"));
        assert!(!c.verify("bob", b"nope"));
        assert!(c.verify("carol", b"pw"));
        assert!(!c.verify("carol", b"pw "));
        // bcrypt is not supported: never matches, and is reported
        assert!(!c.verify("dave", b"anything"));
        assert_eq!(c.unsupported.len(), 1);
        // unknown user
        assert!(!c.verify("eve", b"pw"));
    }

    #[test]
    fn headers_are_decoded() {
        let c = Credentials::from_htpasswd("carol:{PLAIN}p:w");
        assert!(c.verify_header(&header("carol", "p:w")));
        assert!(c.verify_header(format!("basic   {}", STANDARD.encode("carol:p:w")).as_bytes()));
        assert!(!c.verify_header(&header("carol", "p")));
        assert!(!c.verify_header(b"Bearer abc"));
        assert!(!c.verify_header(b"Basic !!!"));
        assert!(!c.verify_header(format!("Basic {}", STANDARD.encode("nocolon")).as_bytes()));
    }

    #[test]
    fn secret_keys() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, ByteString> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect()
        };
        let nginx = Credentials::from_secret_data(&data(&[("auth", "a:{PLAIN}1")])).unwrap();
        assert!(nginx.verify("a", b"1"));
        let traefik = Credentials::from_secret_data(&data(&[("users", "b:{PLAIN}2")])).unwrap();
        assert!(traefik.verify("b", b"2"));
        let basic =
            Credentials::from_secret_data(&data(&[("username", "c"), ("password", "3")])).unwrap();
        assert!(basic.verify("c", b"3"));
        assert!(!basic.verify("c", b"4"));
        assert!(Credentials::from_secret_data(&data(&[("other", "x")])).is_none());
    }
}
