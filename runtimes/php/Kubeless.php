<?php
// Helpers for Kubeless functions running on the kubeless-rs PHP runtime. The worker loads this
// file, so functions use the classes without a require:
//
//   function handler($event, $context) {
//       return new Kubeless\Response(['created' => true], 201, ['Location' => '/items/1']);
//   }
//
// The body follows the plain return rules: a string that is valid UTF-8 -> text/plain, any other
// string -> application/octet-stream, array/number/bool -> JSON, unless the headers name a
// Content-Type.

namespace Kubeless;

/** An HTTP answer with a status code and headers; `$event['extensions']['response']` is one too. */
class Response
{
    public $body;
    public int $status;
    public array $headers;

    public function __construct($body = null, int $status = 200, array $headers = [])
    {
        $this->body = $body;
        $this->status = $status;
        $this->headers = $headers;
    }

    /** PSR-7-like names, but mutating and returning $this, so calls chain. */
    public function withStatus(int $code): self
    {
        $this->status = $code;
        return $this;
    }

    public function withHeader(string $name, string $value): self
    {
        $this->headers[$name] = $value;
        return $this;
    }

    /** Appends to a string body. */
    public function write(string $data): self
    {
        $this->body = ($this->body === null ? '' : (string) $this->body) . $data;
        return $this;
    }

    public function getStatusCode(): int
    {
        return $this->status;
    }
}

/** What `$event['extensions']['request']` holds: PSR-7-like getters. */
class Request
{
    private array $head;
    private array $headers;
    private string $body;

    public function __construct(array $head, array $headers, string $body)
    {
        $this->head = $head;
        $this->headers = $headers;
        $this->body = $body;
    }

    public function getMethod(): string
    {
        return $this->head['method'];
    }

    /** The path without the query string. */
    public function getPath(): string
    {
        return $this->head['path'];
    }

    /** The path and query as received. */
    public function getUrl(): string
    {
        return $this->head['url'];
    }

    public function getQueryString(): string
    {
        return $this->head['query'];
    }

    /** Query parameters: name -> last value. */
    public function getQueryParams(): array
    {
        parse_str($this->head['query'], $out);
        return $out;
    }

    /** All headers, lower-case names, repeated headers joined with ", ". */
    public function getHeaders(): array
    {
        return $this->headers;
    }

    public function getHeaderLine(string $name): string
    {
        return $this->headers[strtolower($name)] ?? '';
    }

    public function hasHeader(string $name): bool
    {
        return isset($this->headers[strtolower($name)]);
    }

    /** The raw body bytes. */
    public function getBody(): string
    {
        return $this->body;
    }

    public function getRemoteAddr(): ?string
    {
        return $this->head['remote_addr'] ?? null;
    }
}
