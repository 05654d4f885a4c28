//! The open-file limit. Every connection is a file descriptor; the usual soft limit (1024) is
//! reached by a thousand idle clients, after which `accept` fails and nobody else gets in.

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};

/// Descriptors kept back from client connections, as a share of the limit: the database, the
/// upstream connections of running runs, tool processes' pipes and web fetches need theirs.
const RESERVED_SHARE: u64 = 4;
/// The least kept back, for small limits.
const RESERVED_MIN: u64 = 64;

/// The open-file limit after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimit {
    /// The soft limit found at start.
    pub before: u64,
    /// The soft limit now in force.
    pub soft: u64,
    /// The hard limit (the most an unprivileged process may raise its soft limit to).
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard limit. Raising it never needs privileges.
pub fn raise() -> nix::Result<FileLimit> {
    let (before, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if before < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(FileLimit { before, soft, hard })
}

/// The open-file limit in force, unchanged.
pub fn current() -> nix::Result<FileLimit> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(FileLimit {
        before: soft,
        soft,
        hard,
    })
}

impl FileLimit {
    /// The most client connections that fit under the soft limit with the reserve kept back.
    pub fn connection_room(&self) -> usize {
        if self.soft == RLIM_INFINITY {
            return usize::MAX;
        }
        let reserve = (self.soft / RESERVED_SHARE).max(RESERVED_MIN);
        usize::try_from(self.soft.saturating_sub(reserve))
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(soft: u64) -> FileLimit {
        FileLimit {
            before: soft,
            soft,
            hard: soft,
        }
    }

    #[test]
    fn room_keeps_a_reserve_for_everything_else() {
        assert_eq!(limit(1024).connection_room(), 768);
        assert_eq!(limit(100).connection_room(), 36);
        assert_eq!(limit(10).connection_room(), 1);
        assert_eq!(limit(1 << 20).connection_room(), 786_432);
        assert_eq!(limit(RLIM_INFINITY).connection_room(), usize::MAX);
    }

    #[test]
    fn raise_reaches_the_hard_limit() {
        let l = raise().unwrap();
        assert_eq!(l.soft, l.hard);
        assert!(l.soft >= l.before);
    }
}
