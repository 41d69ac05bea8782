//! The HTTP/2 settings Weft's gRPC peers grant, read off the wire: a big
//! state crosses in a few flow-control round trips, not one per 64 KiB
//! (docs/cluster.md, Limits). Each side's first SETTINGS frame names its
//! stream window and the largest frame it takes.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use weft_proto::transport::{MAX_FRAME, STREAM_WINDOW};
use weft_tests::TestCluster;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: u8 = 0x4;
const INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_FRAME_SIZE: u16 = 0x5;

/// The first SETTINGS frame `stream` sends (after `skip` bytes): each
/// setting's id and value.
fn first_settings(stream: &mut TcpStream, skip: usize) -> BTreeMap<u16, u32> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut preface = vec![0; skip];
    stream.read_exact(&mut preface).unwrap();
    loop {
        let mut header = [0u8; 9];
        stream.read_exact(&mut header).unwrap();
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let mut payload = vec![0; length];
        stream.read_exact(&mut payload).unwrap();
        // A SETTINGS frame that is not an acknowledgement.
        if header[3] == SETTINGS && header[4] & 0x1 == 0 {
            return payload
                .chunks_exact(6)
                .map(|s| {
                    (
                        u16::from_be_bytes([s[0], s[1]]),
                        u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
                    )
                })
                .collect();
        }
    }
}

/// Settings that grant Weft's stream window and frame size.
fn assert_wide(settings: &BTreeMap<u16, u32>) {
    assert_eq!(
        settings.get(&INITIAL_WINDOW_SIZE),
        Some(&STREAM_WINDOW),
        "{settings:?}"
    );
    assert_eq!(
        settings.get(&MAX_FRAME_SIZE),
        Some(&MAX_FRAME),
        "{settings:?}"
    );
}

#[test]
fn the_coordinator_grants_wide_windows_and_large_frames() {
    let cluster = TestCluster::start().unwrap();
    let address = cluster.url().trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(address).unwrap();
    // A client's preface and empty SETTINGS; the server answers with its own.
    stream.write_all(PREFACE).unwrap();
    stream
        .write_all(&[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0])
        .unwrap();
    let settings = first_settings(&mut stream, 0);
    assert_wide(&settings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_grants_wide_windows_and_large_frames() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        first_settings(&mut stream, PREFACE.len())
    });
    // Nothing answers as a server: the connection fails, after the
    // client has sent its settings.
    let connecting = tokio::spawn(weft_client::Client::connect(url));
    let settings = tokio::task::spawn_blocking(move || accepted.join().unwrap())
        .await
        .unwrap();
    connecting.abort();
    assert_wide(&settings);
}
