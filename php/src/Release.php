<?php

namespace LaravelWorker;

/**
 * Downloads a laravel-worker release archive and checks it: the
 * `laravel-worker-VERSION-x86_64-linux-gnu.tar.gz` of a release, with its
 * SHA-256 given or read from the `SHA256SUMS` file beside it (the format
 * of `sha256sum`). Downloads go to a file, never to memory, and stop at
 * MAX_BYTES.
 */
final class Release
{
    /** The largest archive accepted (bytes). */
    public const MAX_BYTES = 256 * 1024 * 1024;

    /** The largest SHA256SUMS file accepted (bytes). */
    public const MAX_SUMS_BYTES = 1024 * 1024;

    /**
     * Downloads $url to the file $to and checks it against $sha256 (64 hex
     * digits), or, when $sha256 is null, against the line for the archive's
     * file name in the SHA256SUMS beside $url. On a mismatch the file is
     * deleted.
     *
     * @throws InstallException saying what failed and what to do
     */
    public static function download(string $url, string $to, ?string $sha256): void
    {
        $expected = $sha256 !== null ? self::checkedSum($sha256) : self::publishedSum($url);
        self::fetch($url, $to);
        $actual = hash_file('sha256', $to);
        if (! hash_equals($expected, (string) $actual)) {
            @unlink($to);
            throw new InstallException(
                "The download of {$url} has SHA-256 {$actual}, not the expected {$expected}: "
                .'nothing was installed. Check the URL and the checksum (--sha256, '
                .'LARAVEL_WORKER_BINARY_SHA256 or the release\'s SHA256SUMS) and try again.'
            );
        }
    }

    /** $sum in lower case, when it is 64 hex digits. */
    private static function checkedSum(string $sum): string
    {
        $sum = strtolower(trim($sum));
        if (preg_match('/^[0-9a-f]{64}$/', $sum) !== 1) {
            throw new InstallException(
                "The SHA-256 \"{$sum}\" is not 64 hexadecimal digits: give the archive's sum as "
                .'sha256sum prints it.'
            );
        }

        return $sum;
    }

    /** The sum of $url's file in the SHA256SUMS beside it. */
    private static function publishedSum(string $url): string
    {
        $name = basename((string) parse_url($url, PHP_URL_PATH));
        $sumsUrl = substr($url, 0, strrpos($url, '/') + 1).'SHA256SUMS';
        $stream = self::open($sumsUrl, 'its SHA256SUMS file');
        $text = stream_get_contents($stream, self::MAX_SUMS_BYTES);
        fclose($stream);
        foreach (preg_split('/\r?\n/', (string) $text) as $line) {
            if (preg_match('/^([0-9a-fA-F]{64}) [ *](.+)$/', $line, $m) === 1 && $m[2] === $name) {
                return strtolower($m[1]);
            }
        }
        throw new InstallException(
            "{$sumsUrl} has no line for {$name}: check that the URL names a release archive, "
            .'or give its SHA-256 with --sha256 (or LARAVEL_WORKER_BINARY_SHA256).'
        );
    }

    /** Copies $url into the file $to, at most MAX_BYTES. */
    private static function fetch(string $url, string $to): void
    {
        $in = self::open($url, 'the release archive');
        $out = fopen($to, 'wb');
        if ($out === false) {
            fclose($in);
            throw new InstallException("Cannot write the download to {$to}: make its directory writable.");
        }
        $copied = stream_copy_to_stream($in, $out, self::MAX_BYTES + 1);
        fclose($in);
        fclose($out);
        if ($copied === false || $copied > self::MAX_BYTES) {
            @unlink($to);
            throw new InstallException(
                "The download of {$url} failed or is larger than ".self::MAX_BYTES.' bytes: '
                .'check the URL, or download the archive yourself and give --binary=PATH.'
            );
        }
    }

    /**
     * An open stream on $url; an HTTP error status or a failure to connect
     * is an InstallException naming $what.
     *
     * @return resource
     */
    private static function open(string $url, string $what)
    {
        $context = stream_context_create(['http' => [
            'ignore_errors' => true,
            'follow_location' => 1,
            'timeout' => 60,
            'user_agent' => 'laravel-worker-installer/'.Version::PACKAGE,
        ]]);
        $why = 'unknown error';
        set_error_handler(function ($level, $message) use (&$why) {
            $why = $message;

            return true;
        });
        try {
            $stream = fopen($url, 'rb', false, $context);
        } finally {
            restore_error_handler();
        }
        if ($stream === false) {
            throw new InstallException(
                "Cannot download {$what} from {$url} ({$why}): check the URL "
                .'(LARAVEL_WORKER_BINARY_URL or config laravel-worker.binary_url) and that this '
                .'machine reaches it, or download the archive yourself and give --binary=PATH.'
            );
        }
        $status = self::status(stream_get_meta_data($stream)['wrapper_data'] ?? []);
        if ($status !== null && $status >= 400) {
            fclose($stream);
            throw new InstallException(
                "Downloading {$what} from {$url} failed: the server answered HTTP {$status}. "
                .'Check the URL (LARAVEL_WORKER_BINARY_URL or config laravel-worker.binary_url) '
                .'and the release\'s version.'
            );
        }

        return $stream;
    }

    /** The status of the last response in an HTTP stream's headers, if any. */
    private static function status($headers): ?int
    {
        $status = null;
        foreach (is_array($headers) ? $headers : [] as $header) {
            if (is_string($header) && preg_match('#^HTTP/\S+\s+(\d{3})#', $header, $m) === 1) {
                $status = (int) $m[1];
            }
        }

        return $status;
    }
}
