// Package wxcrypt is the message encryption of WeChat's "safe mode"
// callbacks and of WeCom's callbacks (the WXBizMsgCrypt scheme, "消息加解
// 密说明"): the event travels as Encrypt, the base64 of AES-256-CBC
// (key = base64-decode(EncodingAESKey + "="), IV = key[:16], PKCS#7
// padding to 32-byte blocks) over 16 random bytes, the message's length
// (4 bytes, big-endian), the message and the receive id (the AppID of an
// Official Account, the CorpID of a WeCom corp); msg_signature is the hex
// SHA-1 of the token, timestamp, nonce and Encrypt, sorted and joined.
package wxcrypt

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Errors a callback is refused with; nothing of it is to be believed.
var (
	// ErrKey: the EncodingAESKey is not 43 base64 characters of a 32-byte key.
	ErrKey = errors.New("wxcrypt: the EncodingAESKey is not 43 characters of base64 (a 32-byte key)")
	// ErrSignature: msg_signature is not the one the token gives.
	ErrSignature = errors.New("wxcrypt: msg_signature does not match")
	// ErrCiphertext: Encrypt does not decrypt to a well-formed message.
	ErrCiphertext = errors.New("wxcrypt: Encrypt is not a message encrypted with this key")
	// ErrReceiveID: the message was encrypted for another AppID or CorpID.
	ErrReceiveID = errors.New("wxcrypt: the message is for another receive id")
)

// blockSize is the PKCS#7 block the scheme pads to (twice AES's).
const blockSize = 32

// Crypt encrypts and decrypts one app's callbacks; safe for concurrent use.
type Crypt struct {
	token     string
	key       []byte
	receiveID string
}

// New checks the key and returns the app's Crypt. token and receiveID
// must not be empty.
func New(token, encodingAESKey, receiveID string) (*Crypt, error) {
	if token == "" || receiveID == "" {
		return nil, errors.New("wxcrypt: the token and the receive id are required")
	}
	if len(encodingAESKey) != 43 {
		return nil, ErrKey
	}
	key, err := base64.StdEncoding.DecodeString(encodingAESKey + "=")
	if err != nil || len(key) != 32 {
		return nil, ErrKey
	}
	return &Crypt{token: token, key: key, receiveID: receiveID}, nil
}

// Signature is the msg_signature of encrypt: the hex SHA-1 of token,
// timestamp, nonce and encrypt, sorted and joined.
func Signature(token, timestamp, nonce, encrypt string) string {
	parts := []string{token, timestamp, nonce, encrypt}
	slices.Sort(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, "")))
	return hex.EncodeToString(sum[:])
}

// Sign is the msg_signature of encrypt with the app's token.
func (c *Crypt) Sign(timestamp, nonce, encrypt string) string {
	return Signature(c.token, timestamp, nonce, encrypt)
}

// Open verifies msgSignature (constant time) and decrypts encrypt; the
// message must be for the app's receive id.
func (c *Crypt) Open(msgSignature, timestamp, nonce, encrypt string) ([]byte, error) {
	if timestamp == "" || nonce == "" || encrypt == "" {
		return nil, ErrSignature
	}
	want := c.Sign(timestamp, nonce, encrypt)
	if subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(msgSignature))) != 1 {
		return nil, ErrSignature
	}
	return c.Decrypt(encrypt)
}

// Decrypt reads encrypt (without checking a signature: use Open).
func (c *Crypt) Decrypt(encrypt string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(encrypt)
	if err != nil || len(raw) == 0 || len(raw)%aes.BlockSize != 0 {
		return nil, ErrCiphertext
	}
	block, err := aes.NewCipher(c.key)
	if err != nil {
		return nil, fmt.Errorf("wxcrypt: %w", err)
	}
	plain := make([]byte, len(raw))
	cipher.NewCBCDecrypter(block, c.key[:aes.BlockSize]).CryptBlocks(plain, raw)
	pad := int(plain[len(plain)-1])
	if pad < 1 || pad > blockSize || pad > len(plain) {
		return nil, ErrCiphertext
	}
	plain = plain[:len(plain)-pad]
	if len(plain) < 20 {
		return nil, ErrCiphertext
	}
	n := binary.BigEndian.Uint32(plain[16:20])
	if uint64(n) > uint64(len(plain)-20) {
		return nil, ErrCiphertext
	}
	msg, id := plain[20:20+n], plain[20+n:]
	if subtle.ConstantTimeCompare(id, []byte(c.receiveID)) != 1 {
		return nil, ErrReceiveID
	}
	return bytes.Clone(msg), nil
}

// Encrypt encrypts msg for the app's receive id with the 16 random bytes
// given (crypto/rand's in production; fixed in known-answer tests).
func (c *Crypt) Encrypt(msg []byte, random [16]byte) (string, error) {
	plain := make([]byte, 0, 20+len(msg)+len(c.receiveID)+blockSize)
	plain = append(plain, random[:]...)
	plain = binary.BigEndian.AppendUint32(plain, uint32(len(msg)))
	plain = append(plain, msg...)
	plain = append(plain, c.receiveID...)
	pad := blockSize - len(plain)%blockSize
	plain = append(plain, bytes.Repeat([]byte{byte(pad)}, pad)...)
	block, err := aes.NewCipher(c.key)
	if err != nil {
		return "", fmt.Errorf("wxcrypt: %w", err)
	}
	out := make([]byte, len(plain))
	cipher.NewCBCEncrypter(block, c.key[:aes.BlockSize]).CryptBlocks(out, plain)
	return base64.StdEncoding.EncodeToString(out), nil
}

// Envelope is an encrypted callback's XML body: WeChat sends ToUserName
// and Encrypt, WeCom also AgentID.
type Envelope struct {
	XMLName    xml.Name `xml:"xml"`
	ToUserName string   `xml:"ToUserName"`
	AgentID    string   `xml:"AgentID,omitempty"`
	Encrypt    string   `xml:"Encrypt"`
}

// ParseEnvelope reads an encrypted callback's body.
func ParseEnvelope(body []byte) (Envelope, error) {
	var e Envelope
	if err := xml.Unmarshal(body, &e); err != nil {
		return Envelope{}, fmt.Errorf("wxcrypt: the body is not an encrypted callback: %w", err)
	}
	if e.Encrypt == "" {
		return Envelope{}, errors.New("wxcrypt: the body has no Encrypt")
	}
	return e, nil
}
