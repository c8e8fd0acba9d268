package bench

import (
	"bytes"
	"fmt"
	"strconv"
)

// MessageSizeDefault is the size in bytes of one generated JSON message, as the issue asks
// ("~200-byte JSON messages").
const MessageSizeDefault = 200

// markerPrefix starts the string value that identifies each generated message. It sits inside a
// JSON string, so it survives servers that re-serialise JSON or reorder object keys, and counting
// it in a read body counts messages without parsing the body.
const markerPrefix = "dsbench#"

// markerDigits is how many decimal digits follow markerPrefix.
const markerDigits = 10

// messageSkeleton is the message with an empty pad; Message fills the pad to reach the size.
const messageSkeleton = `{"id":"` + markerPrefix + `%0*d","kind":"bench","pad":"%s"}`

// minMessageSize is the size of a message with an empty pad.
var minMessageSize = len(fmt.Sprintf(messageSkeleton, markerDigits, 0, ""))

// Message returns generated JSON message number id, exactly size bytes long (or the smallest
// possible message when size is below that). The message carries id in its marker so that readers
// can tell which message arrived (see MessageID).
func Message(id int64, size int) []byte {
	pad := size - minMessageSize
	if pad < 0 {
		pad = 0
	}
	return []byte(fmt.Sprintf(messageSkeleton, markerDigits, id, padding(pad)))
}

// Batch returns a JSON array of n generated messages numbered from first, each size bytes. In a
// JSON stream the server stores it as n messages in one record (docs/server.md#writes).
func Batch(first int64, n, size int) []byte {
	var b bytes.Buffer
	b.Grow(n*(size+1) + 2)
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(Message(first+int64(i), size))
	}
	b.WriteByte(']')
	return b.Bytes()
}

// CountMessages counts the generated messages in a read body.
func CountMessages(body []byte) int {
	return bytes.Count(body, []byte(markerPrefix))
}

// MessageIDs returns the ids of the generated messages in body, in order of appearance.
func MessageIDs(body []byte) []int64 {
	var ids []int64
	for {
		i := bytes.Index(body, []byte(markerPrefix))
		if i < 0 {
			return ids
		}
		body = body[i+len(markerPrefix):]
		if len(body) < markerDigits {
			return ids
		}
		id, err := strconv.ParseInt(string(body[:markerDigits]), 10, 64)
		if err == nil {
			ids = append(ids, id)
		}
		body = body[markerDigits:]
	}
}

func padding(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[i%len(alphabet)]
	}
	return string(b)
}
