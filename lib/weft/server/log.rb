# frozen_string_literal: true

module Weft
  class Server
    # The server's logs: errors and the startup line on the error log
    # ($stderr by default), one request per line in Common Log Format on
    # the access log ($stdout by default; none with quiet).
    class Log
      MONTHS = %w[Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec].freeze

      def initialize(config)
        @config = config
        @err = config.log
        @access = config.access_log
        @clf_second = nil
        @clf_time = nil
      end

      def access? = !@access.nil?

      # "weft 0.1.0 (Ruby 3.1.2, io_uring) on tcp://127.0.0.1:9292, 2 workers, pid 123"
      def startup(server, backend)
        binds = server.listeners.map { |l| Binder.describe(l, tls: !server.tls_context(l).nil?) }.join(", ")
        workers = server.config.workers
        who = workers.positive? ? "#{workers} worker#{"s" if workers > 1} (master pid #{Process.pid})" : "single process (pid #{Process.pid})"
        info("weft #{Weft::VERSION} (Ruby #{RUBY_VERSION}, #{backend}) serving on #{binds}, #{who}")
      end

      def info(message) = write_err("#{stamp} #{message}\n")
      def error(message) = write_err("#{stamp} ERROR #{message}\n")

      # An exception with its backtrace, as one entry.
      def exception(context, e)
        trace = (e.backtrace || []).first(40).map { |l| "\n    #{l}" }.join
        write_err("#{stamp} ERROR #{context}: #{e.class}: #{e.message}#{trace}\n")
      end

      # host ident user [time] "request line" status bytes
      def access(remote, method, path, query, protocol, status, bytes)
        return unless @access

        target = query.nil? || query.empty? ? path : "#{path}?#{query}"
        line = "#{remote || "-"} - - [#{clf_time}] \"#{method} #{target} " \
               "#{protocol}\" #{status} #{bytes.zero? ? "-" : bytes}\n"
        @access.write(line)
      rescue IOError, SystemCallError
        nil
      end

      private

      def write_err(text)
        @err.write(text)
      rescue IOError, SystemCallError
        nil
      end

      def stamp = Time.now.utc.strftime("%Y-%m-%dT%H:%M:%S.%LZ")

      # [26/Nov/2026:09:13:52 +0000], made once a second.
      def clf_time
        now = Process.clock_gettime(Process::CLOCK_REALTIME, :second)
        return @clf_time if now == @clf_second

        t = Time.at(now).utc
        @clf_second = now
        @clf_time = format("%02d/%s/%04d:%02d:%02d:%02d +0000", t.day, MONTHS[t.month - 1], t.year, t.hour, t.min, t.sec)
      end
    end
  end
end
