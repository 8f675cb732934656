# frozen_string_literal: true

require "stringio"
require "tempfile"
require "weft/server/response"

module Weft
  class Server
    # One client connection, served by its own fiber: read a request head
    # (parsed in C by Weft::HTTP::Parser), its body, call the app, write
    # the response; again while the connection persists. Requests
    # pipelined on a connection are answered in order, one at a time.
    class Connection
      include Response

      BINARY = Encoding::BINARY
      READ_SIZE = 16_384
      CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n"
      # rack.input of every request without a body: read-only, so one
      # serves all, until an app closes it (Rack 3 allows that; Rack 2's
      # Lint forbids it): then a new one.
      @empty_input = StringIO.new("".b.freeze)

      def self.empty_input
        input = @empty_input
        return input unless input.closed_read?

        @empty_input = StringIO.new("".b.freeze)
      end

      attr_reader :remote_addr

      def initialize(server, endpoint, sock, remote_addr)
        @server = server
        @config = server.config
        @log = server.log
        @endpoint = endpoint
        @parser = endpoint.parser # shared until a head arrives in pieces
        @sock = sock
        @remote_addr = remote_addr
        @idle = false
        @hijacked = false
        @closing = false
        @writes = 0
        @writing = false
      end

      # The connection's fiber: serve requests until the connection closes.
      # (Again after being parked: the next request is served.)
      def run
        @fiber = Fiber.current
        @done = false
        @fiber.instance_variable_set(:@__weft_name, self) # Scheduler#dump asks #weft_annotation
        @server._started(@fiber, self)
        @buf ||= String.new(encoding: BINARY)
        @requests ||= 0
        @parked_at = nil
        return unless @requests.positive? || !@endpoint.tls || handshake
        while serve_one(@requests + 1)
          @requests += 1
          # Idle now: with many connections held, wait without a fiber.
          next unless @buf.empty? && @server._park?(self) && !fill_now

          @parked_at = Weft.clock
          @server._park(self)
          return
        end
      rescue Weft::Stop, IOError, SystemCallError
        nil # the peer went away, or the server stops
      ensure
        close unless @hijacked || @parked_at
        @done = true # its fiber may wait for another connection now
        @server._finished(@fiber)
      end

      # An HTTPS connection?
      def tls? = !@endpoint.tls.nil?

      # What Scheduler#dump and stall reports call this connection's fiber.
      def weft_annotation
        env = @env
        request = env && " #{env["REQUEST_METHOD"]} #{env["PATH_INFO"]}#{"?#{env["QUERY_STRING"]}" unless env["QUERY_STRING"].to_s.empty?}"
        number = (@requests || 0) + (@done ? 0 : 1)
        text = "connection from #{@remote_addr || "-"}, request #{number}#{request}#{" (idle)" if @idle}"
        @done ? "spare connection fiber (last: #{text})" : text
      end

      # When it was parked (Weft.clock), or nil.
      attr_reader :parked_at

      def fileno = @sock.fileno

      def close
        @sock.close unless @sock.closed?
      rescue IOError, SystemCallError
        nil
      end

      # Waiting for its next request (keep-alive), nothing of one read yet.
      def idle? = @idle

      # Number of writes begun on the connection, and whether one is under
      # way: Server#watch_writes closes a connection whose write has made
      # no progress for write_timeout (a client that stopped reading).
      attr_reader :writes

      def writing? = @writing

      # Its write made no progress for write_timeout: log it and end the
      # connection (its fiber stops as on shutdown; ensure blocks run).
      def write_timed_out
        return unless @fiber&.alive?

        @log.error("#{@remote_addr || "-"}: the client stopped reading (a write made no progress " \
                   "in #{@config.write_timeout}s); closing the connection")
        @server.scheduler.raise_in(@fiber, Weft::Stop.new("write timeout"))
      end

      # Graceful stop: a connection waiting for its next request goes now
      # (one whose request is being served finishes it first).
      def stop_if_idle
        @server.scheduler.raise_in(@fiber, Weft::Stop.new("server stopping")) if @idle && @fiber&.alive?
      end

      # rack.hijack (full hijack): the app takes the socket. The socket
      # stays non-blocking and driven by the scheduler; the server no
      # longer reads, writes or closes it.
      def call
        @hijacked = true
        @env["rack.hijack_io"] = @sock
        @sock
      end

      private

      # HTTPS: wrap the accepted socket and run the TLS handshake here, in
      # the connection's fiber, within head_timeout. False (logged, and the
      # connection closed by #run) when it fails or times out.
      def handshake
        raw = @sock
        tls = TLSSocket.new(raw, @endpoint.tls)
        tls.sync_close = true
        @sock = tls
        return true if tls.handshake(Weft.clock + @config.head_timeout)

        @log.error("#{@remote_addr || "-"}: TLS handshake timed out (#{@config.head_timeout}s)")
        false
      rescue TLSError => e
        @log.error("#{@remote_addr || "-"}: TLS handshake failed: #{e.message}")
        plain_http_to_tls(raw) if e.message.include?("http request")
        false
      end

      PLAIN_TO_TLS = "This port speaks HTTPS: use https://\n"
      private_constant :PLAIN_TO_TLS

      # A plain HTTP request on an HTTPS port (OpenSSL saw a request line
      # where a ClientHello belongs): say so in plain HTTP, as a 400,
      # before the connection is closed, rather than only dropping it.
      def plain_http_to_tls(raw)
        raw.write_nonblock("HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n" \
                           "content-length: #{PLAIN_TO_TLS.bytesize}\r\nconnection: close\r\n\r\n" \
                           "#{PLAIN_TO_TLS}", exception: false)
      rescue IOError, SystemCallError
        nil
      end

      # Serve one request; true when the connection stays open for another.
      def serve_one(number)
        env = @endpoint.template.dup
        head = read_head(env, number)
        return false unless head

        parser = @parser
        keep = parser.keep_alive?
        chunked = parser.chunked?
        length = parser.content_length
        continue = parser.expect_continue?
        head_only = parser.head?
        minor = parser.version_minor
        if head == @buf.bytesize
          @buf.clear
        else
          @buf = @buf.byteslice(head, @buf.bytesize - head)
        end

        # Content-Length repeated with one value is accepted; the env
        # gets that value, not the fields joined ("3, 3").
        cl = env["CONTENT_LENGTH"]
        env["CONTENT_LENGTH"] = length.to_s if cl && !chunked && cl.include?(",")
        input = chunked ? read_chunked(env, continue) : read_body(length, continue)
        return false unless input

        env["rack.input"] = input
        # A unix socket's peer has no address: the loopback's, as other
        # Rack servers give, so that apps and middleware that read it
        # (loggers, rate limits) find one.
        env["REMOTE_ADDR"] = @remote_addr || "127.0.0.1"
        env["rack.hijack"] = self
        # Callables run once the answer is out (Response#finished).
        env["rack.after_reply"] = []
        env["rack.response_finished"] = []
        @env = env
        # The request as received, for the logs: an app may rewrite the
        # env's (Rails' error pages make a "POST /x" a "GET /404").
        @method = env["REQUEST_METHOD"]
        @path = env["PATH_INFO"]
        @query = env["QUERY_STRING"]
        @protocol = env["SERVER_PROTOCOL"]
        keep &&= !@closing && number < @config.max_requests && !@server.stopping?
        keep = respond(env, keep, head_only, minor)
        # Closing with pipelined requests unread would reset the
        # connection, and the reset can destroy the answer just sent.
        linger if !keep && !@hijacked && !@buf.empty?
        keep
      ensure
        input.close if input.is_a?(Tempfile)
      end

      # Read until a complete head is in @buf; its length, or nil after
      # answering an error (or when the peer left or stayed silent).
      def read_head(env, number)
        if @buf.empty?
          return nil if @server.stopping? && number > 1
          return nil unless wait_for_request(number)
        end
        deadline = Weft.clock + @config.head_timeout
        @parser.reset if @parser.equal?(@endpoint.parser) # another's scan may be left in it
        loop do
          n = @parser.parse(@buf, env)
          if n
            return n if n.positive?

            return error_response(-n)
          end
          # Incomplete: keep the scan's progress in a parser of our own (the
          # endpoint's is shared by every connection between two waits).
          if @parser.equal?(@endpoint.parser)
            @parser = @endpoint.new_parser
            @parser.parse(@buf, env)
          end
          got = fill(deadline)
          return error_response(408) if got == false
          return nil if got.nil? # the peer closed mid-head
        end
      end

      # Wait for the first bytes of a request. Between two requests the
      # connection is idle: a graceful stop ends it, unless a request has
      # already arrived (served with Connection: close). A new connection's
      # first request is awaited even then (head_timeout): its client has
      # just been accepted and is sending it.
      def wait_for_request(number)
        timeout = number == 1 ? @config.head_timeout : @config.idle_timeout
        @idle = number > 1
        got = begin
          fill(Weft.clock + timeout)
        rescue Weft::Stop
          @idle = false
          @closing = true
          return fill_now || raise
        ensure
          @idle = false
        end
        got ? true : nil
      end

      # Append what the socket has to @buf. true after reading, false when
      # +deadline+ passed first, nil at end of stream.
      def fill(deadline)
        shared = @server.read_buffer
        loop do
          r = @sock.read_nonblock(READ_SIZE, shared, exception: false)
          if r == :wait_readable
            left = deadline - Weft.clock
            return false if left <= 0 || !@sock.wait_readable(left)
          elsif r.nil?
            return nil
          else
            @buf << r
            return true
          end
        end
      end

      # One read without waiting (true when something was there).
      def fill_now
        r = @sock.read_nonblock(READ_SIZE, @server.read_buffer, exception: false)
        return false if r.nil? || r == :wait_readable

        @buf << r
        true
      rescue IOError, SystemCallError
        false
      end

      # rack.input for a Content-Length body (an empty one without).
      def read_body(length, continue)
        return Connection.empty_input if length.zero?

        put(CONTINUE) if continue && @buf.bytesize < length
        if @buf.bytesize >= length
          body = @buf.byteslice(0, length)
          @buf = @buf.byteslice(length, @buf.bytesize - length)
          return StringIO.new(body)
        end
        sink = BodySink.new(@config.input_memory)
        sink << @buf
        @buf = String.new(encoding: BINARY)
        left = length - sink.size
        while left.positive?
          chunk = read_some([left, 65_536].min)
          unless chunk
            sink.discard
            return nil
          end
          sink << chunk
          left -= chunk.bytesize
        end
        sink.input
      end

      # rack.input for a chunked body, decoded; CONTENT_LENGTH is set to
      # its size and Transfer-Encoding removed, as for a sized body.
      def read_chunked(env, continue)
        decoder = Weft::HTTP::Chunked.new(max_body: @config.max_body, max_line: @config.max_head)
        sink = BodySink.new(@config.input_memory)
        data = String.new(encoding: BINARY)
        src = @buf
        @buf = String.new(encoding: BINARY)
        sent_continue = !continue
        loop do
          used = decoder.feed(src, data)
          if used.negative?
            sink.discard
            return error_response(-used)
          end
          sink << data
          data.clear
          if decoder.done?
            @buf = src.byteslice(used, src.bytesize - used) if used < src.bytesize
            break
          end
          unless sent_continue
            put(CONTINUE)
            sent_continue = true
          end
          src = read_some(65_536)
          unless src
            sink.discard
            return nil
          end
        end
        env["CONTENT_LENGTH"] = decoder.size.to_s
        env.delete("HTTP_TRANSFER_ENCODING")
        sink.input
      end

      # Up to +max+ body bytes; nil when the peer closed, after a 408 when
      # body_timeout passed without any byte.
      def read_some(max)
        loop do
          r = @sock.read_nonblock(max, exception: false)
          return r if r.is_a?(String)
          return nil if r.nil?
          return error_response(408) unless @sock.wait_readable(@config.body_timeout)
        end
      end

      # Answer a request we refuse (400, 408, 413, 414, 431, 501, 505) and
      # close: the rest of the input cannot be trusted to frame a request.
      # Always nil (the caller's "connection over").
      def error_response(status)
        write_error(status)
        @log.error("#{@remote_addr || "-"}: #{status} #{Weft::HTTP.reason(status)} (request refused)") if status != 408
        linger
        nil
      end

      # Half-close, then read and drop what the client still sends for a
      # moment: closing with unread input would reset the connection and
      # could destroy the answer before the client reads it.
      def linger
        @sock.close_write
        deadline = Weft.clock + 1
        total = 0
        while total < 1 << 20
          r = @sock.read_nonblock(READ_SIZE, @server.read_buffer, exception: false)
          if r == :wait_readable
            left = deadline - Weft.clock
            break if left <= 0 || !@sock.wait_readable(left)
          else
            break if r.nil?

            total += r.bytesize
          end
        end
      rescue IOError, SystemCallError
        nil
      end

      # A request body on its way to rack.input: in memory up to +limit+
      # bytes, then in an unlinked Tempfile.
      class BodySink
        def initialize(limit)
          @limit = limit
          @mem = String.new(encoding: BINARY)
          @file = nil
          @size = 0
        end

        attr_reader :size

        def <<(data)
          return self if data.empty?

          @size += data.bytesize
          if @file
            @file.write(data)
          elsif @mem.bytesize + data.bytesize > @limit
            @file = Tempfile.new("weft-body")
            @file.unlink
            @file.binmode
            @file.write(@mem)
            @file.write(data)
            @mem = nil
          else
            @mem << data
          end
          self
        end

        def input
          return StringIO.new(@mem) unless @file

          @file.rewind
          @file
        end

        def discard
          @file&.close
        end
      end
    end
  end
end
