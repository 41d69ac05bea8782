//! The embedded store's files are private.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[tokio::test]
async fn the_data_directory_and_its_files_are_the_owners_alone() {
    let dir = std::env::temp_dir().join(format!("weft-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    let file = data.join("weft.redb");
    drop(super::EmbeddedStore::open(&file).unwrap());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "the data directory");
    assert_eq!(mode(&file), 0o600, "the store file");
    assert_eq!(mode(&data.join("weft.redb.wal")), 0o600, "its log");
    // An existing directory and store are made private too.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(super::EmbeddedStore::open(&file).unwrap());
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&file), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}
