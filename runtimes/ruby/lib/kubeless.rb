# Helpers for Kubeless functions running on the kubeless-rs Ruby runtime.
#
#   require 'kubeless'
#
#   def handler(event, context)
#     Kubeless::Response.new({ created: true }, status: 201, headers: { 'Location' => '/items/1' })
#   end
#
# The body follows the plain return rules: a UTF-8 String -> text/plain, a binary
# (ASCII-8BIT) String -> application/octet-stream, Hash/Array/number/boolean -> JSON,
# unless the headers already name a Content-Type.
module Kubeless
  # An HTTP answer with a status code and headers.
  class Response
    attr_accessor :body, :status, :headers

    def initialize(body = nil, status: 200, headers: {})
      @body = body
      @status = Integer(status)
      @headers = headers.to_h
    end
  end
end
