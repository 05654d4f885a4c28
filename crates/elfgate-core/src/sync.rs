//! The poison-tolerant locks (a mutex's, a read-write lock's), defined once for every crate that
//! shares state across tasks.
//!
//! A std mutex (or read-write lock) is poisoned when a thread panics while holding it. The
//! daemon's locks guard small state (a map, a counter, a slot) that each critical section leaves
//! whole at every step, and a panic is caught and reported where it happens (an engine's panic
//! ends its run with `engine_panic`); refusing every later lock would turn that one failure into
//! a daemon that can no longer serve anyone. So the lock is taken whatever a panicking holder
//! left.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `l` for reading, poisoned or not.
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `l` for writing, poisoned or not.
pub fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::{lock, read, write};
    use std::sync::{Arc, Mutex, RwLock};

    #[test]
    fn a_mutex_poisoned_by_a_panic_is_still_locked_with_its_value() {
        let shared = Arc::new(Mutex::new(1));
        let holder = shared.clone();
        let panicked = std::thread::spawn(move || {
            let mut n = holder.lock().unwrap();
            *n = 2;
            panic!("poisons the mutex");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        *lock(&shared) += 1;
        assert_eq!(*lock(&shared), 3);
    }

    #[test]
    fn a_read_write_lock_poisoned_by_a_panic_is_still_read_and_written() {
        let shared = Arc::new(RwLock::new(1));
        let holder = shared.clone();
        let panicked = std::thread::spawn(move || {
            let mut n = holder.write().unwrap();
            *n = 2;
            panic!("poisons the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        *write(&shared) += 1;
        assert_eq!(*read(&shared), 3);
    }
}
