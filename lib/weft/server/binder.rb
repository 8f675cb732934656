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
      def open(uris, backlog: 1024) = open_each(uris, backlog: backlog).flatten

      # The same, as one Array of Sockets per URI: tcp://localhost:PORT
      # listens on every loopback address (127.0.0.1 and ::1), as Puma
      # does: a client may resolve localhost to either (`rails server`
      # binds localhost in development).
      def open_each(uris, backlog: 1024)
        opened = []
        uris.map do |uri|
          spec = parse(uri)
          socks = spec[0] == :tcp && spec[1] == "localhost" ? listen_loopback(spec[2], backlog) : [listen(spec, backlog)]
          opened.concat(socks)
          socks
        rescue SystemCallError, SocketError => e
          close(opened, unlink: true)
          raise BindError, "cannot listen on #{uri}: #{e.message}"
        end
      end

      # Listeners on +port+ of each loopback address, IPv4 first (port 0:
      # the one the first got, for all). An address the host cannot bind
      # (IPv6 off) is left out.
      def listen_loopback(port, backlog)
        socks = []
        loopback_addresses.each do |ip|
          socks << listen([:tcp, ip, port], backlog)
          port = socks.last.local_address.ip_port
        rescue Errno::EADDRNOTAVAIL, Errno::EAFNOSUPPORT
          nil
        end
        raise Errno::EADDRNOTAVAIL, "localhost" if socks.empty?

        socks
      rescue StandardError
        close(socks)
        raise
      end

      def loopback_addresses
        ips = Socket.ip_address_list.select { |a| a.ipv4_loopback? || a.ipv6_loopback? }
        ips = ips.sort_by { |a| a.ipv4? ? 0 : 1 }.map(&:ip_address).uniq
        ips.empty? ? ["127.0.0.1"] : ips
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
