//! Whether the client of the request being answered has hung up, so that
//! `serve` stops generating for nobody. tiny_http keeps a request's socket
//! private, so the socket is found among the process's open descriptors
//! (Linux: `/proc/self/fd`) as the one whose two ends are the server's
//! address and the client's, duplicated (tiny_http may close its own
//! descriptors of the connection, and the numbers be reused, while the
//! completion runs), and then peeked at without blocking: end of
//! stream (the client closed, or shut its side down, as nginx counts a
//! client abort) or a reset means the client is gone. Elsewhere, or when
//! no socket matches, nothing is ever reported.
//!
//! Peeking reads nothing: the request's body has been read already, and
//! tiny_http reads the connection's next request only after this one is
//! answered, so no other reader races the peek.

use std::net::SocketAddr;

/// Our own descriptor of one connection's socket, for peeking.
#[derive(Debug)]
pub struct Hangup {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fd: i32,
}

#[cfg(target_os = "linux")]
impl Drop for Hangup {
    fn drop(&mut self) {
        // SAFETY: `fd` is the duplicate `find` made; nothing else closes it.
        unsafe { libc::close(self.fd) };
    }
}

impl Hangup {
    /// The socket of the connection from `peer` to the server at `local`.
    #[cfg(target_os = "linux")]
    pub fn find(local: SocketAddr, peer: SocketAddr) -> Option<Self> {
        let ends = |fd| sock_addr(fd, libc::getsockname) == Some(local) && sock_addr(fd, libc::getpeername) == Some(peer);
        let fds = std::fs::read_dir("/proc/self/fd").ok()?;
        fds.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).filter(|&fd| ends(fd)).find_map(|fd| {
            // SAFETY: duplicating a descriptor has no effect on the
            // original; the duplicate is ours (closed on drop).
            let own = Hangup { fd: unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) } };
            // Checked again: `fd` may have been closed and reused since.
            (own.fd >= 0 && ends(own.fd)).then_some(own)
        })
    }

    /// Never found off Linux.
    #[cfg(not(target_os = "linux"))]
    pub fn find(_local: SocketAddr, _peer: SocketAddr) -> Option<Self> {
        None
    }

    /// True once the client has closed or reset the connection.
    #[cfg(target_os = "linux")]
    pub fn hung_up(&self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: a one-byte buffer we own; MSG_PEEK consumes nothing and
        // MSG_DONTWAIT leaves the descriptor's own flags alone.
        let n = unsafe { libc::recv(self.fd, byte.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        match n {
            0 => true,
            n if n > 0 => false,
            _ => {
                let e = std::io::Error::last_os_error();
                !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted)
            }
        }
    }

    /// Never off Linux.
    #[cfg(not(target_os = "linux"))]
    pub fn hung_up(&self) -> bool {
        false
    }
}

/// One end of socket `fd` (`getsockname` or `getpeername`), if it is an
/// IP socket.
#[cfg(target_os = "linux")]
fn sock_addr(fd: i32, end: unsafe extern "C" fn(i32, *mut libc::sockaddr, *mut libc::socklen_t) -> i32) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    // SAFETY: an all-zero sockaddr_storage is valid; `end` writes at most
    // `len` bytes into it and fails on descriptors that are no sockets.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    if unsafe { end(fd, (&mut storage as *mut libc::sockaddr_storage).cast(), &mut len) } != 0 {
        return None;
    }
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: libc::sockaddr_in = unsafe { *(&storage as *const libc::sockaddr_storage).cast() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { *(&storage as *const libc::sockaddr_storage).cast() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), a.sin6_flowinfo, a.sin6_scope_id)))
        }
        _ => None,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    /// The server's end of a connection is found by its two addresses, and
    /// reports the hang-up only once the client has closed it.
    #[test]
    fn a_closed_connection_is_seen_from_the_server_end() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_end, peer) = listener.accept().unwrap();
        let h = Hangup::find(server_end.local_addr().unwrap(), peer).expect("the accepted socket");
        assert!(!h.hung_up());
        client.write_all(b"more").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!h.hung_up(), "unread bytes are no hang-up");
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!h.hung_up(), "the unread bytes come first");
        let mut buf = [0u8; 4];
        std::io::Read::read_exact(&mut &server_end, &mut buf).unwrap();
        assert!(h.hung_up(), "then the end of the stream");
        assert!(Hangup::find(server_end.local_addr().unwrap(), "127.0.0.1:1".parse().unwrap()).is_none());
    }

    /// The server's own descriptor may be closed, and its number taken by
    /// another connection, while a completion runs (tiny_http closes its
    /// reading half once the client hangs up): the hang-up is still seen.
    #[test]
    fn a_hang_up_is_seen_after_the_server_closed_its_descriptor() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_end, peer) = listener.accept().unwrap();
        let h = Hangup::find(server_end.local_addr().unwrap(), peer).unwrap();
        drop(server_end);
        let _other = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_reused, _) = listener.accept().unwrap();
        assert!(!h.hung_up());
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(h.hung_up());
    }
}
