//! Secret files of a data directory (the admin token, the CA's key, a serving key): read
//! only when this user owns them and no one else may read or write them, so that a file
//! planted by another user, or one every user could read, is never trusted.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The file at `path`, or none when it is missing. A file that is not this user's plain
/// file of mode 0600 (or stricter) is refused with `PermissionDenied` and a message that
/// says what to do.
pub fn read(path: &Path) -> io::Result<Option<String>> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let me = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o777;
    if !meta.is_file() || meta.uid() != me || mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} must be a plain file of this user's (uid {me}) with mode 0600, and is {} of uid {} with mode {mode:04o}: another user may have read or planted it; remove it (berth makes a new one) or `chmod 600` it if it is yours",
                path.display(),
                if meta.is_file() {
                    "a file"
                } else {
                    "not a plain file"
                },
                meta.uid()
            ),
        ));
    }
    std::fs::read_to_string(path).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_file_of_this_users_alone_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert!(read(&path).unwrap().is_none());
        std::fs::write(&path, "t\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("mode 0644"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read(&path).unwrap().as_deref(), Some("t\n"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(
            read(&link)
                .unwrap_err()
                .to_string()
                .contains("not a plain file")
        );
    }
}
