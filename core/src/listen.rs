//! Where a service listens: an address to bind, or `stdin`, a listening socket bound by the
//! parent and handed over as standard input (inetd's `wait` style).
//!
//! The hand-over is for supervisors and test harnesses that must know the port before the
//! service starts without a window in which another process can take it: the parent binds
//! `127.0.0.1:0`, reads the port, and starts the service with that socket as its stdin and
//! `…_LISTEN=stdin`. Connections that arrive before the service accepts wait in the
//! socket's backlog instead of being refused.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::str::FromStr;

/// A listen setting: `host:port` (port 0 picks a free port) or `stdin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// Bind this `host:port`.
    Addr(SocketAddr),
    /// Use the listening socket handed over as standard input.
    Stdin,
}

impl Listen {
    /// The listening socket, non-blocking (ready for `tokio::net::TcpListener::from_std`).
    /// Errors say which setting failed and why.
    pub fn bind(&self) -> io::Result<TcpListener> {
        let listener = match self {
            Self::Addr(addr) => TcpListener::bind(addr)
                .map_err(|e| io::Error::new(e.kind(), format!("bind {addr}: {e}")))?,
            Self::Stdin => {
                let fd = io::stdin().as_fd().try_clone_to_owned()?;
                let listener = TcpListener::from(fd);
                listener.local_addr().map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("`stdin` was given as the listen address but standard input is not a bound TCP socket: {e}"),
                    )
                })?;
                listener
            }
        };
        listener.set_nonblocking(true)?;
        Ok(listener)
    }
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "stdin" {
            return Ok(Self::Stdin);
        }
        s.parse()
            .map(Listen::Addr)
            .map_err(|_| format!("`{s}` is neither host:port (e.g. 127.0.0.1:8080) nor `stdin`"))
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Addr(a) => a.fmt(f),
            Self::Stdin => f.write_str("stdin"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_and_stdin_and_rejects_the_rest() {
        assert_eq!(
            "127.0.0.1:0".parse::<Listen>().unwrap(),
            Listen::Addr("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!("stdin".parse::<Listen>().unwrap(), Listen::Stdin);
        assert!("localhost".parse::<Listen>().is_err());
        assert_eq!(Listen::Stdin.to_string(), "stdin");
    }

    #[test]
    fn port_zero_binds_a_free_port() {
        let l = Listen::Addr("127.0.0.1:0".parse().unwrap()).bind().unwrap();
        assert_ne!(l.local_addr().unwrap().port(), 0);
    }

    #[test]
    fn stdin_that_is_not_a_socket_is_a_clear_error() {
        // The test runner's stdin is a terminal, a pipe or /dev/null, never a socket.
        let err = Listen::Stdin.bind().unwrap_err();
        assert!(err.to_string().contains("not a bound TCP socket"), "{err}");
    }
}
