//! A real etcd server for tests: Debian's `etcd` binary on free loopback
//! ports with a temporary data directory, killed and removed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A running etcd.
pub struct TestEtcd {
    child: Child,
    dir: PathBuf,
    /// Its client URL, `http://127.0.0.1:PORT` (`https://` with TLS).
    pub url: String,
    peer_url: String,
    /// With TLS: how the health check reaches it (`curl` arguments).
    tls: Option<EtcdTlsFiles>,
}

/// The files of an etcd that serves TLS and asks clients for certificates
/// signed by `ca`.
#[derive(Debug, Clone)]
pub struct EtcdTlsFiles {
    /// The CA of the server's and clients' certificates.
    pub ca: PathBuf,
    /// The server's certificate (for 127.0.0.1) and key.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// A client certificate the CA signed, for the health check.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
}

/// Starts an etcd member alone in its cluster, keeping its data in `dir`.
fn spawn(
    dir: &std::path::Path,
    url: &str,
    peer_url: &str,
    tls: Option<&EtcdTlsFiles>,
) -> Result<Child> {
    let mut command = Command::new("etcd");
    if let Some(tls) = tls {
        command
            .arg("--cert-file")
            .arg(&tls.cert)
            .arg("--key-file")
            .arg(&tls.key)
            .arg("--trusted-ca-file")
            .arg(&tls.ca)
            .arg("--client-cert-auth");
    }
    command
        .arg("--data-dir")
        .arg(dir)
        .args(["--listen-client-urls", url, "--advertise-client-urls", url])
        .args(["--listen-peer-urls", peer_url])
        .args(["--initial-advertise-peer-urls", peer_url])
        .args(["--initial-cluster", &format!("default={peer_url}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting etcd (Debian: apt-get install etcd-server)")
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl TestEtcd {
    /// Starts etcd and waits until it answers. Its ports are picked free
    /// and then bound by etcd, so another process may take one in between:
    /// etcd then exits at once, and is started again on other ports.
    pub async fn start() -> Result<Self> {
        Self::start_with(None).await
    }

    /// Starts etcd serving TLS (`tls`'s certificate), with client
    /// certificate authentication (`--client-cert-auth`).
    pub async fn start_tls(tls: EtcdTlsFiles) -> Result<Self> {
        Self::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<EtcdTlsFiles>) -> Result<Self> {
        let mut last = None;
        for _ in 0..5 {
            match Self::start_once(tls.clone()).await {
                Ok(etcd) => return Ok(etcd),
                Err(error) => last = Some(error),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    async fn start_once(tls: Option<EtcdTlsFiles>) -> Result<Self> {
        let (client, peer) = (free_port()?, free_port()?);
        let dir = std::env::temp_dir().join(format!("weft-etcd-{}-{client}", std::process::id()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = spawn(&dir, &url, &peer_url, tls.as_ref())?;
        let mut etcd = Self {
            child,
            dir,
            url,
            peer_url,
            tls,
        };
        etcd.wait_ready().await?;
        Ok(etcd)
    }

    /// Kills etcd (SIGKILL) and waits until it is gone; its data stays.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Starts etcd again on the same ports and data, after [`kill`]
    /// (Self::kill), and waits until it answers.
    pub async fn start_again(&mut self) -> Result<()> {
        self.child = spawn(&self.dir, &self.url, &self.peer_url, self.tls.as_ref())?;
        self.wait_ready().await
    }

    /// Polls etcd's `/health` on its client port until it says so; fails
    /// at once if etcd exits (a port was taken).
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let address = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_owned();
        loop {
            let up = match &self.tls {
                None => healthy(&address),
                Some(tls) => healthy_over_tls(&self.url, tls),
            };
            if up {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("etcd at {} exited at start ({status})", self.url);
            }
            if std::time::Instant::now() > deadline {
                bail!("etcd at {} did not answer within 30 s", self.url);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends a signal (`STOP`, `CONT`, …) to the etcd process.
    pub fn signal(&self, signal: &str) -> Result<()> {
        crate::send_signal(self.child.id(), signal)
    }
}

/// Whether etcd at `address` answers `GET /health` with `"health":"true"`.
fn healthy(address: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

/// Whether etcd at `url` answers `/health` over TLS (curl, presenting
/// the client certificate).
fn healthy_over_tls(url: &str, tls: &EtcdTlsFiles) -> bool {
    Command::new("curl")
        .args(["-sS", "--max-time", "2", "--cacert"])
        .arg(&tls.ca)
        .arg("--cert")
        .arg(&tls.client_cert)
        .arg("--key")
        .arg(&tls.client_key)
        .arg(format!("{url}/health"))
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("\"health\":\"true\""))
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
