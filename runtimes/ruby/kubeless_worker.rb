# Ruby worker for the kubeless-rs runtime proxy.
#
# The proxy starts N of these. Each one loads MOD_NAME.rb from the install
# volume, connects to the unix socket named by KUBELESS_WORKER_SOCKET and
# answers one framed call at a time: u32 header length, JSON header, u32 body
# length, body. Function output (puts, warn) goes to the process's
# stdout/stderr, which the proxy passes through to the container log; frames
# never share them.

require 'json'
require 'socket'
require 'stringio'
require 'uri'

$stdout.sync = true
$stderr.sync = true
$LOAD_PATH.unshift(File.join(__dir__, 'lib'))
require 'kubeless'

module KubelessWorker
  COALESCE = 64 * 1024
  OCTET_STREAM = 'application/octet-stream'.freeze
  TEXT = 'text/plain; charset=utf-8'.freeze

  # What event['extensions']['request'] holds: Rack/Sinatra-like names.
  class Request
    attr_reader :request_method, :path, :url, :query_string, :headers, :ip

    def initialize(head, headers, body)
      @request_method = head['method']
      @path = head['path']
      @url = head['url']
      @query_string = head['query']
      @headers = headers
      @raw = body
      @ip = head['remote_addr']
    end

    def fullpath = @url
    def path_info = @path
    def get? = @request_method == 'GET'
    def post? = @request_method == 'POST'

    # Query parameters: name -> last value.
    def params
      @params ||= URI.decode_www_form(@query_string.to_s).to_h
    end
    alias query params

    # The body as an IO, like Rack's request.body.
    def body
      StringIO.new(@raw)
    end

    # A header by name, case-insensitive; Rack-style `HTTP_X_NAME` works too.
    def get_header(name)
      key = name.to_s.downcase
      key = key.delete_prefix('http_').tr('_', '-') if key.start_with?('http_')
      @headers[key]
    end
    alias [] get_header
  end

  module_function

  def json_type?(ctype)
    return false if ctype.nil?

    media = ctype.split(';', 2)[0].strip.downcase
    media == 'application/json' || media.end_with?('+json')
  end

  def event_data(headers, body)
    ctype = headers['content-type']
    if json_type?(ctype)
      return nil if body.empty?

      begin
        return JSON.parse(body.dup.force_encoding(Encoding::UTF_8))
      rescue JSON::ParserError
        return body
      end
    end
    media = ctype.to_s.split(';', 2)[0].to_s.strip.downcase
    text = body.dup.force_encoding(Encoding::UTF_8)
    # Text is a UTF-8 String; octet-stream or anything that is not UTF-8 stays binary.
    media != 'application/octet-stream' && text.valid_encoding? ? text : body
  end

  # Body bytes and default content type for a return value.
  def encode(value)
    case value
    when nil then ['', nil]
    when String
      if value.encoding == Encoding::BINARY
        [value, OCTET_STREAM]
      else
        [value.encode(Encoding::UTF_8).b, TEXT]
      end
    when Hash, Array, Numeric, true, false then [JSON.generate(value).b, 'application/json']
    else [value.to_s.b, TEXT]
    end
  end

  def to_response(result)
    status = 200
    headers = {}
    body = result
    if result.is_a?(Kubeless::Response)
      status = result.status
      headers = result.headers
      body = result.body
    end
    data, ctype = encode(body)
    out = headers.map { |k, v| [k.to_s, v.to_s] }
    out << ['content-type', ctype] if ctype && out.none? { |k, _| k.casecmp?('content-type') }
    [{ 'status' => Integer(status), 'headers' => out }, data]
  end

  # The context, plus the call's W3C trace context when it has one.
  def call_context(context, headers)
    tp = headers['traceparent'] or return context
    ctx = context.merge('traceparent' => tp)
    ctx['tracestate'] = headers['tracestate'] if headers.key?('tracestate')
    ctx
  end

  def read_exact(sock, n)
    return ''.b if n.zero?

    data = sock.read(n)
    data.nil? || data.bytesize < n ? nil : data
  end

  def read_frame(sock)
    len = read_exact(sock, 4) or return nil
    head = read_exact(sock, len.unpack1('N')) or return nil
    len = read_exact(sock, 4) or return nil
    body = read_exact(sock, len.unpack1('N')) or return nil
    [JSON.parse(head.force_encoding(Encoding::UTF_8)), body]
  end

  def write_frame(sock, head, body = ''.b)
    h = JSON.generate(head).b
    prefix = [h.bytesize].pack('N') << h << [body.bytesize].pack('N')
    if body.bytesize <= COALESCE
      sock.write(prefix << body)
    else
      sock.write(prefix)
      sock.write(body)
    end
  end

  # Gems installed by `kubeless-runtime install` (bundler, into <volume>/vendor/bundle).
  def setup_bundler(volume)
    gemfile = File.join(volume, 'Gemfile')
    return unless File.file?(gemfile)

    ENV['BUNDLE_GEMFILE'] ||= gemfile
    ENV['BUNDLE_PATH'] ||= File.join(volume, 'vendor', 'bundle')
    require 'bundler/setup'
  end

  def main
    sock_path = ENV['KUBELESS_WORKER_SOCKET']
    if sock_path.nil? || sock_path.empty?
      warn 'kubeless worker: KUBELESS_WORKER_SOCKET is not set'
      return 2
    end
    volume = ENV['KUBELESS_INSTALL_VOLUME'] || Dir.pwd
    mod_name = ENV.fetch('MOD_NAME', '')
    func_name = ENV.fetch('FUNC_HANDLER', '')
    sock = UNIXSocket.new(sock_path)
    sock.binmode
    sock.sync = true

    receiver = TOPLEVEL_BINDING.receiver
    begin
      setup_bundler(volume)
      $LOAD_PATH.unshift(volume)
      load File.join(volume, "#{mod_name}.rb")
      unless receiver.respond_to?(func_name, true)
        raise NoMethodError, "#{mod_name}.rb defines no method #{func_name}"
      end
    rescue Exception => e # report any load failure, even SystemExit
      warn "#{e.class}: #{e.message}\n\t#{(e.backtrace || []).join("\n\t")}"
      write_frame(sock, { 'ready' => false, 'error' => "cannot load #{mod_name}.#{func_name}: #{e.class}: #{e.message}" })
      return 1
    end
    write_frame(sock, { 'ready' => true, 'pid' => Process.pid })

    context = {
      'function-name' => func_name,
      'timeout' => ENV.fetch('FUNC_TIMEOUT', ''),
      'runtime' => ENV.fetch('FUNC_RUNTIME', ''),
      'memory-limit' => ENV.fetch('FUNC_MEMORY_LIMIT', '')
    }
    loop do
      frame = read_frame(sock) or return 0
      head, body = frame
      headers = {}
      head['headers'].each { |k, v| headers[k] = headers.key?(k) ? "#{headers[k]}, #{v}" : v }
      event = {
        'data' => event_data(headers, body),
        'event-id' => headers['event-id'],
        'event-type' => headers['event-type'],
        'event-time' => headers['event-time'],
        'event-namespace' => headers['event-namespace'],
        'extensions' => { 'request' => Request.new(head, headers, body) }
      }
      begin
        rhead, rbody = to_response(receiver.send(func_name, event, call_context(context, headers)))
      rescue StandardError, ScriptError, SystemStackError => e
        warn "#{e.class}: #{e.message}\n\t#{(e.backtrace || []).join("\n\t")}"
        rhead = { 'status' => 500, 'headers' => [['content-type', TEXT]], 'error' => "#{e.class}: #{e.message}" }
        rbody = "Internal Server Error\n".b
      end
      write_frame(sock, rhead, rbody)
    end
  end
end

exit(KubelessWorker.main || 0)
