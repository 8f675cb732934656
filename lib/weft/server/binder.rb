# frozen_string_literal: true

require "socket"

module Weft
  class Server
    # Listening sockets from bind URIs: tcp://HOST:PORT (HOST may be an
    # IPv6 literal in brackets; PORT 0 picks a free port), unix:PATH and
    # ssl://HOST:PORT?cert=PATH&key=PATH (a TCP listener whose
    # connections speak TLS: see TLS.context_for).
    # A bind that cannot be opened (in use, no permission, bad address).
    class BindError < StandardError; end

    module Binder
      module_function

      # Parse one bind URI: [:tcp, host, port] or [:unix, path] (an
      # ssl:// one is a TCP listener). ArgumentError for anything else.
      def parse(uri)
        uri = uri.sub(%r{\Assl://}, "tcp://").sub(/\?.*\z/m, "") if uri.start_with?("ssl://")
        case uri
        when %r{\Atcp://\[([0-9a-fA-F:.]+)\]:(\d+)\z} then [:tcp, Regexp.last_match(1), Integer(Regexp.last_match(2), 10)]
        when %r{\Atcp://([^:/\[\]]+):(\d+)\z} then [:tcp, Regexp.last_match(1), Integer(Regexp.last_match(2), 10)]
        when %r{\Aunix:(?://)?(.+)\z} then [:unix, Regexp.last_match(1)]
        else raise ArgumentError, "bad bind #{uri.inspect}: use tcp://HOST:PORT, ssl://HOST:PORT or unix:PATH"
        end
      end

      # Open and listen on every URI; returns the Sockets. On failure the
      # ones already opened are closed and BindError says which bind.
      def open(uris, backlog: 1024)
        opened = []
        uris.each do |uri|
          opened << listen(parse(uri), backlog)
        rescue SystemCallError, SocketError => e
          close(opened, unlink: true)
          raise BindError, "cannot listen on #{uri}: #{e.message}"
        end
        opened
      end

      def listen(spec, backlog)
        if spec[0] == :tcp
          addr = Addrinfo.tcp(spec[1], spec[2])
          sock = Socket.new(addr.afamily, Socket::SOCK_STREAM, 0)
          sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_REUSEADDR, 1)
          # Accepted sockets inherit it (Linux copies the listener's).
          sock.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
        else
          path = spec[1]
          remove_stale(path)
          addr = Addrinfo.unix(path)
          sock = Socket.new(Socket::AF_UNIX, Socket::SOCK_STREAM, 0)
        end
        begin
          sock.bind(addr)
          sock.listen(backlog)
        rescue StandardError
          sock.close
          raise
        end
        sock
      end

      # A socket file nobody listens on (left by a killed server) is
      # removed; one in use is an error, as for a TCP port.
      def remove_stale(path)
        return unless File.socket?(path)

        begin
          UNIXSocket.new(path).close
        rescue Errno::ECONNREFUSED
          File.unlink(path)
          return
        end
        raise Errno::EADDRINUSE, path
      end

      # Close listeners; with +unlink+, remove their socket files.
      def close(listeners, unlink: false)
        listeners.each do |l|
          path = l.local_address.unix_path if unlink && l.local_address.unix?
          l.close unless l.closed?
          File.unlink(path) if path && File.socket?(path)
        rescue IOError, SystemCallError
          nil
        end
      end

      # What a listener is, for logs: tcp://127.0.0.1:9292 or unix:/path
      # (ssl://... with +tls+).
      def describe(listener, tls: false)
        a = listener.local_address
        return "unix:#{a.unix_path}" if a.unix?

        scheme = tls ? "ssl" : "tcp"
        a.ipv6? ? "#{scheme}://[#{a.ip_address}]:#{a.ip_port}" : "#{scheme}://#{a.ip_address}:#{a.ip_port}"
      end
    end
  end
end
