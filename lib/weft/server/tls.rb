# frozen_string_literal: true

require "openssl"
require "uri"

module Weft
  class Server
    # A TLS certificate or key that cannot be used (missing, unreadable,
    # not PEM, or a key that does not match the certificate).
    class TLSConfigError < ArgumentError; end

    # A TLS failure on a connection (bad record, alert from the peer):
    # an IOError, so the server treats it as any peer that went away.
    class TLSError < IOError; end

    # HTTPS binds: ssl://HOST:PORT?cert=PATH&key=PATH, served with Ruby's
    # OpenSSL on the connection's fiber (see TLSSocket).
    module TLS
      module_function

      # The SSLContext of an ssl:// bind (the query's cert and key, else
      # +cert+ and +key+: --tls-cert and --tls-key); nil for other binds.
      def context_for(uri, cert, key)
        return nil unless uri.start_with?("ssl://")

        query = uri.include?("?") ? URI.decode_www_form(uri.split("?", 2)[1]).to_h : {}
        cert = query.fetch("cert", cert)
        key = query.fetch("key", key)
        raise TLSConfigError, "#{uri}: no certificate (add ?cert=PATH or --tls-cert PATH)" unless cert
        raise TLSConfigError, "#{uri}: no private key (add &key=PATH or --tls-key PATH)" unless key

        context(cert, key)
      end

      # A server SSLContext from PEM files: the certificate (then, in the
      # same file, its chain) and the private key.
      def context(cert_path, key_path)
        pem = read(cert_path, "certificate")
        certs = begin
          pem.scan(/-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----/m).map { |c| OpenSSL::X509::Certificate.new(c) }
        rescue OpenSSL::X509::CertificateError => e
          raise TLSConfigError, "TLS certificate #{cert_path}: #{e.message}"
        end
        raise TLSConfigError, "TLS certificate #{cert_path}: no PEM certificate in it" if certs.empty?

        key = begin
          OpenSSL::PKey.read(read(key_path, "private key"))
        rescue OpenSSL::PKey::PKeyError, ArgumentError => e
          raise TLSConfigError, "TLS private key #{key_path}: not a PEM private key (#{e.message})"
        end
        unless certs.first.check_private_key(key)
          raise TLSConfigError, "TLS private key #{key_path} does not match the certificate #{cert_path}"
        end

        ctx = OpenSSL::SSL::SSLContext.new
        ctx.min_version = OpenSSL::SSL::TLS1_2_VERSION
        ctx.cert = certs.first
        ctx.extra_chain_cert = certs.drop(1) if certs.size > 1
        ctx.key = key
        ctx.alpn_select_cb = ->(protocols) { "http/1.1" if protocols.include?("http/1.1") }
        ctx.freeze # set up now: shared by every connection (and worker)
        ctx
      end

      def read(path, what)
        File.read(path)
      rescue SystemCallError, IOError => e
        raise TLSConfigError, "TLS #{what} #{path}: #{e.message}"
      end
    end

    # An accepted connection's TLS side. An OpenSSL::SSL::SSLSocket (so an
    # app hijacking the connection gets one), whose every wait goes through
    # the connection's IO and so through the fiber scheduler: a slow peer
    # holds its own fiber only. OpenSSL errors surface as TLSError.
    class TLSSocket < OpenSSL::SSL::SSLSocket
      # The handshake, within +deadline+ (Weft.clock): true when done,
      # false when the deadline passed. Raises TLSError when it fails.
      def handshake(deadline)
        io = to_io
        loop do
          r = accept_nonblock(exception: false)
          return true if r.equal?(self)

          left = deadline - Weft.clock
          return false if left <= 0
          return false unless r == :wait_writable ? io.wait_writable(left) : io.wait_readable(left)
        end
      rescue OpenSSL::SSL::SSLError => e
        raise TLSError, e.message
      end

      # As IO#read_nonblock; never returns :wait_writable (waits instead:
      # the TLS layer may have to write before it can read).
      def read_nonblock(length, buffer = nil, exception: true)
        loop do
          r = super(length, buffer, exception: false)
          if r == :wait_writable
            to_io.wait_writable
          elsif r == :wait_readable && exception
            raise IO::EAGAINWaitReadable, "read would block"
          else
            return r
          end
        end
      rescue OpenSSL::SSL::SSLError => e
        raise TLSError, e.message
      end

      # Data decrypted but not read yet counts as readable.
      def wait_readable(timeout = nil)
        return self if pending.positive?

        to_io.wait_readable(timeout) && self
      end

      def wait_writable(timeout = nil) = to_io.wait_writable(timeout) && self

      def sysread(length, buffer = nil)
        loop do
          r = buffer ? sysread_nonblock(length, buffer, exception: false) : sysread_nonblock(length, exception: false)
          raise EOFError, "end of file reached" if r.nil?
          return r if r.is_a?(String)

          r == :wait_writable ? to_io.wait_writable : to_io.wait_readable
        end
      rescue OpenSSL::SSL::SSLError => e
        raise TLSError, e.message
      end

      def syswrite(data)
        loop do
          r = syswrite_nonblock(data, exception: false)
          return r if r.is_a?(Integer)

          r == :wait_readable ? to_io.wait_readable : to_io.wait_writable
        end
      rescue OpenSSL::SSL::SSLError => e
        raise TLSError, e.message
      end

      # TLS has no half-close: the TCP side is (after a close_notify).
      def close_write
        stop
      rescue OpenSSL::SSL::SSLError, SystemCallError, IOError
        nil
      ensure
        to_io.close_write
      end

      def close_read = to_io.close_read

      def close
        super
      rescue OpenSSL::SSL::SSLError, SystemCallError, IOError
        nil
      ensure
        io = to_io
        io.close unless io.closed?
      end
    end
  end
end
