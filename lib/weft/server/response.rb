# frozen_string_literal: true

require "weft/server/stream"

module Weft
  class Server
    # Calling the app and writing its response (mixed into Connection).
    module Response
      BINARY = Encoding::BINARY
      TOKEN = /\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/.freeze
      BAD_VALUE = /[\r\n\0]/.freeze
      CRLF = "\r\n"
      LAST_CHUNK = "0\r\n\r\n"
      CLOSE = "connection: close\r\n"
      KEEP_ALIVE = "connection: keep-alive\r\n"
      CHUNKED = "transfer-encoding: chunked\r\n"
      STATUS_LINES = Hash.new do |h, status|
        h[status] = "HTTP/1.1 #{status} #{Weft::HTTP.reason(status)}\r\n".b.freeze if status.is_a?(Integer)
      end
      # Response header names the server acts on, in the spellings apps
      # use; others are looked up again in lower case when their length
      # matches one of these.
      SPECIAL = {}.tap do |h|
        %w[content-length transfer-encoding connection date server].each do |name|
          h[name] = name
          h[name.split("-").map(&:capitalize).join("-")] = name
          h[name.upcase] = name
        end
      end.freeze
      SPECIAL_LENGTHS = SPECIAL.keys.map(&:bytesize).uniq.freeze
      # Exceptions the server lets through instead of answering 500:
      # Weft::Stop (the server's own, ending the fiber), SignalException
      # (Ctrl-C or a signal without a trap raises it in whatever fiber is
      # running, which may be a request's: it must end #run) and
      # NoMemoryError. SystemExit is not among them: an app's exit or
      # abort in a request is answered with a 500 and logged, and the
      # server goes on, as under Puma (where the app runs on a pool
      # thread). The one it cannot tell apart: a trap of the program's own
      # that calls exit while a request's fiber runs (most of the time the
      # loop's fiber runs traps, and its exit ends #run); `weft serve` and
      # the Rack handler trap INT and TERM with #stop instead.
      FATAL = [Weft::Stop, NoMemoryError, SignalException].freeze
      AFTER_REPLY = "rack.after_reply"
      RESPONSE_FINISHED = "rack.response_finished"
      ERROR_BODY = "Internal Server Error"
      # Bodies up to this size are copied into the head's string and sent
      # with it in one write.
      COALESCE = 64 * 1024
      # Writes larger than this go in pieces of it (see #put).
      PIECE = 1024 * 1024

      # An app's response the server cannot send: 500 and a log line
      # naming the problem.
      class Invalid < StandardError; end

      private

      # Every write of a response goes through here. A large one goes in
      # PIECE-sized writes, so that the timeout bounds each piece and a
      # slow client still reading a big answer is not cut off.
      def put(data)
        return timed_pieces(data) if data.bytesize > PIECE

        @writes += 1
        @writing = true
        @sock.write(data)
      rescue IOError, SystemCallError
        @peer_gone = true
        raise
      ensure
        @writing = false
      end

      def timed_pieces(data)
        off = 0
        while off < data.bytesize
          piece = data.byteslice(off, PIECE)
          timed { @sock.write(piece) }
          off += PIECE
        end
      end

      def timed
        @writes += 1
        @writing = true
        yield
      rescue IOError, SystemCallError
        @peer_gone = true
        raise
      ensure
        @writing = false
      end

      # The access log line of this request: its method, path and query as
      # received (kept by Connection#serve_one before the app is called;
      # Rails' error pages rewrite the env's to "GET /404" and the like).
      def log_access(status, bytes)
        @log.access(@remote_addr, @method, @path, @query, @protocol, status, bytes)
      end

      # Call the app and answer; true when the connection stays open.
      def respond(env, keep, head_only, minor)
        body = status = headers = error = nil
        @peer_gone = false # set when a write to the client fails
        begin
          status, headers, body = @app_response = @server.app.call(env)
        rescue *FATAL
          raise
        rescue Exception => e # rubocop:disable Lint/RescueException
          error = e
          @log.exception("#{@method} #{@path}", e)
          # After a full hijack the socket is the app's: no 500 into it.
          return @hijacked ? false : internal_error(env, keep)
        end
        return false if @hijacked # full hijack: the app owns the socket now

        keep &&= !@server.stopping? # a stop began while the app ran
        writes = @writes
        begin
          keep = write_response(env, status, headers, body, keep, head_only, minor)
        rescue *FATAL
          raise
        rescue Exception => e # rubocop:disable Lint/RescueException
          error = e
          keep = response_failed(env, e, keep, writes)
        end
        @server._served
        keep
      ensure
        close_body(body, env)
        finished(env, status, headers, error)
      end

      # After the answer went out and its body was closed: the callables
      # the app left in rack.after_reply (Puma's, no arguments, in order)
      # and rack.response_finished (Rack 3.1's: env, status, headers and
      # the error that ended the request, or nil; in reverse order). One
      # that raises is logged and the others still run.
      def finished(env, status, headers, error)
        after = env[AFTER_REPLY]
        after.each { |c| finished_call(c) } if after.is_a?(Array) && !after.empty?
        done = env[RESPONSE_FINISHED]
        return unless done.is_a?(Array) && !done.empty?

        done.reverse_each { |c| finished_call(c, env, status, headers, error) }
      end

      def finished_call(callable, *args)
        callable.call(*args)
      rescue *FATAL
        raise
      rescue Exception => e # rubocop:disable Lint/RescueException
        @log.exception("#{@method} #{@path}: a response-finished callback", e)
      end

      # The app's response raised while it was being sent (headers#each,
      # body#to_ary, #each, #to_path, a streaming body or a partial hijack
      # callback): log it; answer 500 if nothing was sent yet, else end the
      # connection (a truncated answer, never a complete-looking one). A
      # failed write to the client only ends the connection.
      def response_failed(env, error, keep, writes)
        if @hijacked
          # A streaming body or hijack callback owned the socket: its
          # errors writing to a client that left are not the app's fault.
          unless error.is_a?(IOError) || error.is_a?(SystemCallError)
            @log.exception("#{@method} #{@path}: streaming the response", error)
          end
          close # nothing else will: the server no longer serves it
          return false
        end
        raise error if @peer_gone

        @log.exception("#{@method} #{@path}: sending the response", error)
        return internal_error(env, keep) if @writes == writes

        false
      end

      def close_body(body, env)
        body.close if body.respond_to?(:close)
      rescue *FATAL
        raise
      rescue Exception => e # rubocop:disable Lint/RescueException
        @log.exception("#{@method} #{@path}: body.close", e)
      end

      def internal_error(env, keep)
        write_head_only(500, ERROR_BODY, keep)
        log_access(500, ERROR_BODY.bytesize)
        @server._served
        keep
      end

      def write_head_only(status, text, keep)
        put("#{STATUS_LINES[status]}content-type: text/plain\r\ncontent-length: #{text.bytesize}\r\n" \
                    "#{@server.date_line}#{keep ? "" : CLOSE}\r\n#{text}")
      end

      # The answer to a refused request, then the connection closes.
      def write_error(status)
        write_head_only(status, Weft::HTTP.reason(status), false)
      rescue IOError, SystemCallError
        nil
      end

      # Validate and send; returns whether the connection persists.
      def write_response(env, status, headers, body, keep, head_only, minor)
        code = status_code(status)
        head = STATUS_LINES[code].dup
        keep = add_headers(head, headers, keep, code)
        length = @length
        chunked_by_app = @chunked_by_app
        hijack = @hijack
        # 1xx, 204 and 304 have no body; nor has an answer to HEAD.
        no_body = head_only || code < 200 || code == 204 || code == 304

        if hijack
          end_head(head, false, minor)
          put(head)
          log_access(code, 0)
          @hijacked = true
          hijack.call(@sock)
          return false
        end

        if body.respond_to?(:to_ary) && (parts = body.to_ary)
          send_parts(env, head, code, parts, length || chunked_by_app, head_only, no_body, keep, minor)
        elsif !no_body && body.respond_to?(:to_path) && !body.respond_to?(:call) && File.file?(path = body.to_path.to_s)
          send_file(env, head, code, path, length, keep, minor)
        elsif body.respond_to?(:each)
          send_each(env, head, code, body, length || chunked_by_app, no_body, keep, minor)
        elsif body.respond_to?(:call)
          send_stream(env, head, code, body, length, no_body, minor)
        else
          raise Invalid, "the body (#{body.class}) responds to none of each, to_ary, to_path, call"
        end
      rescue Invalid => e
        @log.error("#{@method} #{@path}: invalid response from the app: #{e.message}")
        internal_error(env, keep)
      end

      # Rack 3 wants an Integer; Rack 2 a status that "parsed as integer
      # (to_i)" is a code, so "404" and "404 Not Found" are one too.
      def status_code(status)
        code = status.is_a?(Integer) ? status : status.to_s[/\A\d+/]&.to_i
        raise Invalid, "status #{status.inspect} is not an Integer" unless code
        raise Invalid, "status #{status.inspect} is not between 100 and 999" unless code.between?(100, 999)

        code
      end

      # Append the app's header fields (validated), Date and Server to
      # +head+. Sets @length (content-length or nil), @chunked_by_app and
      # @hijack (a partial hijack callback or nil); returns keep.
      def add_headers(head, headers, keep, code)
        raise Invalid, "headers (#{headers.class}) do not respond to each" unless headers.respond_to?(:each)

        @length = @hijack = nil
        @chunked_by_app = date = server = false
        headers.each do |name, value|
          raise Invalid, "header name #{name.inspect} is not a String" unless name.is_a?(String)

          if name.start_with?("rack.")
            if name == "rack.hijack"
              raise Invalid, "rack.hijack header does not respond to call" unless value.respond_to?(:call)

              @hijack = value
            end
            next
          end
          raise Invalid, "header name #{name.inspect} is not a token" unless TOKEN.match?(name)

          special = SPECIAL[name] || (SPECIAL_LENGTHS.include?(name.bytesize) && SPECIAL[name.downcase])
          if special
            values = header_values(name, value)
            case special
            when "content-length"
              raise Invalid, "content-length #{value.inspect} is not a number" unless values.size == 1 && /\A\d+\z/.match?(values[0])
              next if code < 200 || code == 204 # never with a 1xx or 204 (RFC 9110)

              @length = values[0].to_i
            when "transfer-encoding"
              next if code < 200 || code == 204

              @chunked_by_app = true
            when "connection"
              keep = false if values.any? { |v| v.casecmp?("close") }
              next # ours is written at the end of the head
            when "date" then date = true
            when "server" then server = true
            end
            values.each { |v| add_field(head, name, v) }
          elsif value.is_a?(String) && !value.include?("\n")
            raise Invalid, "header #{name} value #{value.inspect} has CR, LF or NUL" if BAD_VALUE.match?(value)

            add_field(head, name, value) # the common case, without an Array
          else
            header_values(name, value).each { |v| add_field(head, name, v) }
          end
        end
        head << @server.date_line unless date
        head << @server.server_line unless server
        keep
      end

      def add_field(head, name, value)
        head << name << ": " << (value.ascii_only? ? value : value.b) << CRLF
      end

      # A value (Rack 3: a String or an Array of Strings; Rack 2: lines
      # joined by "\n" for repeated fields) as an Array of field values,
      # each free of CR, LF and NUL. Other values are sent as their to_s,
      # as Puma sends them: an app that says "content-length" => 5 (an
      # Integer; both Rack specs want a String) works under Puma, and used
      # to get a 500 here. nil is an empty value.
      def header_values(name, value)
        values =
          if value.is_a?(String)
            value.include?("\n") ? value.split("\n") : [value]
          elsif value.is_a?(Array)
            value.map { |v| v.is_a?(String) ? v : value_string(name, v) }
          else
            s = value_string(name, value)
            s.include?("\n") ? s.split("\n") : [s]
          end
        values.each do |v|
          raise Invalid, "header #{name} value #{v.inspect} has CR, LF or NUL" if BAD_VALUE.match?(v)
        end
        values
      end

      def value_string(name, value)
        s = value.to_s
        raise Invalid, "header #{name} has a #{value.class} value whose to_s is no String" unless s.is_a?(String)

        s
      end

      # Append body bytes to a binary buffer (a non-ASCII String in
      # another encoding would otherwise change the buffer's encoding).
      def append(buf, str)
        buf << (str.ascii_only? || str.encoding == BINARY ? str : str.b)
      end

      # The Connection field and the end of the head.
      def end_head(head, keep, minor)
        if !keep
          head << CLOSE
        elsif minor.zero?
          head << KEEP_ALIVE
        end
        head << CRLF
      end

      # A body given as an Array (to_ary): one write, Content-Length added.
      # (HEAD: an empty body says nothing of the GET's length, so none.)
      def send_parts(env, head, code, parts, framed, head_only, no_body, keep, minor)
        bytes = 0
        parts.each do |p|
          raise Invalid, "body part #{p.class} is not a String" unless p.is_a?(String)

          bytes += p.bytesize
        end
        unless framed || code < 200 || code == 204 || code == 304 || (head_only && bytes.zero?)
          head << "content-length: " << bytes.to_s << CRLF
        end
        keep = close_after_mismatch(env, bytes) if !no_body && @length && @length != bytes
        end_head(head, keep, minor)
        # One write: IO#write with several strings costs Ruby 3.1 under a
        # scheduler one send per string plus a poll between them.
        if no_body || bytes.zero?
          put(head)
        elsif bytes <= COALESCE
          parts.each { |p| append(head, p) }
          put(head)
        else
          put(head)
          parts.each { |p| put(p) }
        end
        log_access(code, no_body ? 0 : bytes)
        keep
      end

      # A file body (to_path): sent by the kernel (sendfile through
      # IO.copy_stream), never read into Ruby strings.
      def send_file(env, head, code, path, length, keep, minor)
        File.open(path, "rb") do |file|
          size = length || file.size
          head << "content-length: #{size}\r\n" unless length
          end_head(head, keep, minor)
          put(head)
          # In pieces, so that write_timeout bounds each piece, not the
          # whole file (a slow reader of a big file is still reading).
          sent = 0
          while sent < size
            n = timed { IO.copy_stream(file, @sock, [size - sent, PIECE].min, sent) }
            break if n.zero? # the file is shorter than said

            sent += n
          end
          log_access(code, size)
          keep = close_after_mismatch(env, sent) if sent < size
        end
        keep
      end

      # The app's Content-Length is not the size of the body it gave. The
      # answer goes out as the app framed it, but the connection closes
      # after it: what the client takes for the end of this answer (too
      # early, or never) must not become the start of the next one. Logs
      # it; returns keep (false).
      def close_after_mismatch(env, bytes)
        @log.error("#{@method} #{@path}: the app's content-length is #{@length}, " \
                   "its body #{bytes} bytes; closing the connection after the answer")
        false
      end

      # A body that yields its parts (each): written as they come, framed
      # by the app's Content-Length, or chunked (HTTP/1.1), or by closing
      # the connection (HTTP/1.0). The head goes out with the first part.
      def send_each(env, head, code, body, framed, no_body, keep, minor)
        chunk = false
        unless framed || no_body || code < 200 || code == 204 || code == 304
          if minor.zero?
            keep = false
          else
            head << CHUNKED
            chunk = true
          end
        end
        end_head(head, keep, minor)
        if no_body
          # HEAD, 1xx, 204, 304: nothing of the body goes out, so it is
          # not iterated (only closed): no work for parts never sent, and
          # Rack::Lint takes parts yielded for a HEAD for an app error.
          put(head)
          log_access(code, 0)
          return keep
        end
        pending = head
        bytes = 0
        begin
          body.each do |part|
            raise Invalid, "body part #{part.class} is not a String" unless part.is_a?(String)
            next if part.empty?

            bytes += part.bytesize
            out = pending || String.new(encoding: BINARY, capacity: part.bytesize + 16)
            out << part.bytesize.to_s(16) << CRLF if chunk
            if part.bytesize <= COALESCE
              append(out, part)
              out << CRLF if chunk
              put(out)
            else
              put(out)
              put(part)
              put(CRLF) if chunk
            end
            pending = nil
          end
        rescue Invalid, StandardError => e
          raise if @peer_gone # the client left
          raise if pending && e.is_a?(Invalid) # nothing sent: answer 500

          if pending
            @log.exception("#{@method} #{@path}: body.each", e)
            return internal_error(env, keep)
          end
          # The head is out: all we can do is end the connection, so the
          # client sees a truncated (never a complete-looking) answer.
          @log.exception("#{@method} #{@path}: body.each after the head was sent", e)
          return false
        end
        if pending
          pending << LAST_CHUNK if chunk
          put(pending)
        elsif chunk
          put(LAST_CHUNK)
        end
        log_access(code, bytes)
        keep = close_after_mismatch(env, bytes) if !no_body && @length && @length != bytes
        keep
      end

      # Rack 3 streaming body (call(stream)): the head, then the body owns
      # the connection (closed when it closes the stream).
      def send_stream(env, head, code, body, length, no_body, minor)
        end_head(head, false, minor)
        put(head)
        log_access(code, length || 0)
        return false if no_body

        @hijacked = true
        body.call(Stream.new(@sock))
        false
      end
    end
  end
end
