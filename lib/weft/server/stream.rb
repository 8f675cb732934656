# frozen_string_literal: true

module Weft
  class Server
    # The stream handed to a Rack 3 streaming body (body.call(stream)):
    # the connection after the response head, in both directions. Reads
    # and writes go through the scheduler like any socket I/O of a fiber.
    class Stream
      def initialize(sock)
        @sock = sock
      end

      def read(length = nil, buffer = nil)
        return @sock.read(length, buffer) if length.nil? || !length.positive?

        @sock.readpartial(length, buffer)
      rescue EOFError
        nil
      end

      def write(data)
        @sock.write(data)
      end

      def <<(data)
        write(data)
        self
      end

      def flush = self

      def close_read = @sock.close_read
      def close_write = @sock.close_write

      def close
        @sock.close unless @sock.closed?
      rescue IOError, SystemCallError
        nil
      end

      def closed? = @sock.closed?
    end
  end
end
