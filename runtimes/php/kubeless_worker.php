<?php
// PHP worker for the kubeless-rs runtime proxy.
//
// The proxy starts N of these. Each one includes MOD_NAME.php from the install volume (after
// vendor/autoload.php when composer installed dependencies), connects to the unix socket named
// by KUBELESS_WORKER_SOCKET and answers one framed call at a time: u32 header length, JSON
// header, u32 body length, body. Function output (echo, error_log) goes to the process's
// stdout/stderr, which the proxy passes through to the container log; frames never share them.

declare(strict_types=1);

require __DIR__ . '/Kubeless.php';

const KUBELESS_COALESCE = 65536;
const KUBELESS_TEXT = 'text/plain; charset=utf-8';

// An idle worker waits for its next call as long as it takes.
ini_set('default_socket_timeout', '-1');
ini_set('display_errors', 'stderr');

function kubeless_read_exact($sock, int $n): ?string
{
    if ($n === 0) {
        return '';
    }
    $buf = '';
    while (strlen($buf) < $n) {
        $chunk = fread($sock, $n - strlen($buf));
        if ($chunk === false || $chunk === '') {
            if (feof($sock)) {
                return null;
            }
            continue;
        }
        $buf .= $chunk;
    }
    return $buf;
}

function kubeless_read_frame($sock): ?array
{
    $len = kubeless_read_exact($sock, 4);
    if ($len === null) {
        return null;
    }
    $head = kubeless_read_exact($sock, unpack('N', $len)[1]);
    $len = $head === null ? null : kubeless_read_exact($sock, 4);
    $body = $len === null ? null : kubeless_read_exact($sock, unpack('N', $len)[1]);
    if ($body === null) {
        return null;
    }
    return [json_decode($head, true, 512, JSON_THROW_ON_ERROR), $body];
}

function kubeless_write_all($sock, string $data): void
{
    $off = 0;
    $len = strlen($data);
    while ($off < $len) {
        $n = fwrite($sock, $off === 0 ? $data : substr($data, $off));
        if ($n === false || $n === 0) {
            throw new RuntimeException('kubeless worker: the proxy closed the socket');
        }
        $off += $n;
    }
}

function kubeless_write_frame($sock, array $head, string $body = ''): void
{
    $h = json_encode($head, JSON_UNESCAPED_SLASHES | JSON_THROW_ON_ERROR);
    $prefix = pack('N', strlen($h)) . $h . pack('N', strlen($body));
    if (strlen($body) <= KUBELESS_COALESCE) {
        kubeless_write_all($sock, $prefix . $body);
    } else {
        kubeless_write_all($sock, $prefix);
        kubeless_write_all($sock, $body);
    }
}

function kubeless_is_json(?string $ctype): bool
{
    if ($ctype === null) {
        return false;
    }
    $media = strtolower(trim(explode(';', $ctype, 2)[0]));
    return $media === 'application/json' || str_ends_with($media, '+json');
}

function kubeless_event_data(array $headers, string $body)
{
    if (kubeless_is_json($headers['content-type'] ?? null)) {
        if ($body === '') {
            return null;
        }
        try {
            return json_decode($body, true, 512, JSON_THROW_ON_ERROR);
        } catch (JsonException $e) {
            return $body;
        }
    }
    return $body;
}

/** Body bytes and default content type for a return value. */
function kubeless_encode($value): array
{
    if ($value === null) {
        return ['', null];
    }
    if (is_string($value)) {
        return [$value, preg_match('//u', $value) === 1 ? KUBELESS_TEXT : 'application/octet-stream'];
    }
    if (is_array($value) || is_int($value) || is_float($value) || is_bool($value) || $value instanceof JsonSerializable) {
        return [json_encode($value, JSON_UNESCAPED_SLASHES | JSON_THROW_ON_ERROR), 'application/json'];
    }
    return [(string) $value, KUBELESS_TEXT];
}

function kubeless_to_response($result): array
{
    $status = 200;
    $headers = [];
    $body = $result;
    if ($result instanceof Kubeless\Response) {
        $status = $result->status;
        $headers = $result->headers;
        $body = $result->body;
    }
    [$data, $ctype] = kubeless_encode($body);
    $out = [];
    $hasType = false;
    foreach ($headers as $k => $v) {
        $out[] = [(string) $k, (string) $v];
        $hasType = $hasType || strtolower((string) $k) === 'content-type';
    }
    if ($ctype !== null && !$hasType) {
        $out[] = ['content-type', $ctype];
    }
    return [['status' => $status, 'headers' => $out], $data];
}

function kubeless_main(): int
{
    $sockPath = getenv('KUBELESS_WORKER_SOCKET');
    if ($sockPath === false || $sockPath === '') {
        fwrite(STDERR, "kubeless worker: KUBELESS_WORKER_SOCKET is not set\n");
        return 2;
    }
    $volume = getenv('KUBELESS_INSTALL_VOLUME') ?: getcwd();
    $modName = getenv('MOD_NAME') ?: '';
    $funcName = getenv('FUNC_HANDLER') ?: '';
    $sock = stream_socket_client('unix://' . $sockPath, $errno, $errstr);
    if ($sock === false) {
        fwrite(STDERR, "kubeless worker: cannot connect to $sockPath: $errstr\n");
        return 1;
    }
    stream_set_write_buffer($sock, 0);

    try {
        // Dependencies installed by `kubeless-runtime install` (composer, into <volume>/vendor).
        if (is_file("$volume/vendor/autoload.php")) {
            require "$volume/vendor/autoload.php";
        }
        require "$volume/$modName.php";
        if (!function_exists($funcName)) {
            throw new RuntimeException("$modName.php defines no function $funcName");
        }
    } catch (Throwable $e) {
        fwrite(STDERR, (string) $e . "\n");
        kubeless_write_frame($sock, ['ready' => false, 'error' => "cannot load $modName.$funcName: " . get_class($e) . ': ' . $e->getMessage()]);
        return 1;
    }
    kubeless_write_frame($sock, ['ready' => true, 'pid' => getmypid()]);

    $context = [
        'function-name' => $funcName,
        'timeout' => getenv('FUNC_TIMEOUT') ?: '',
        'runtime' => getenv('FUNC_RUNTIME') ?: '',
        'memory-limit' => getenv('FUNC_MEMORY_LIMIT') ?: '',
    ];
    while (($frame = kubeless_read_frame($sock)) !== null) {
        [$head, $body] = $frame;
        $headers = [];
        foreach ($head['headers'] as [$k, $v]) {
            $headers[$k] = isset($headers[$k]) ? $headers[$k] . ', ' . $v : $v;
        }
        $event = [
            'data' => kubeless_event_data($headers, $body),
            'event-id' => $headers['event-id'] ?? null,
            'event-type' => $headers['event-type'] ?? null,
            'event-time' => $headers['event-time'] ?? null,
            'event-namespace' => $headers['event-namespace'] ?? null,
            'extensions' => [
                'request' => new Kubeless\Request($head, $headers, $body),
                'response' => new Kubeless\Response(),
            ],
        ];
        try {
            $callContext = $context;
            // The call's W3C trace context, when it has one.
            foreach (['traceparent', 'tracestate'] as $k) {
                if (isset($headers[$k])) {
                    $callContext[$k] = $headers[$k];
                }
            }
            [$rhead, $rbody] = kubeless_to_response($funcName($event, $callContext));
        } catch (Throwable $e) {
            fwrite(STDERR, (string) $e . "\n");
            $rhead = [
                'status' => 500,
                'headers' => [['content-type', KUBELESS_TEXT]],
                'error' => get_class($e) . ': ' . $e->getMessage(),
            ];
            $rbody = "Internal Server Error\n";
        }
        kubeless_write_frame($sock, $rhead, $rbody);
    }
    return 0;
}

exit(kubeless_main());
