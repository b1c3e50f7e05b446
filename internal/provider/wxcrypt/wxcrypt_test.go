package wxcrypt_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/provider/wxcrypt"
)

// The official samples' vectors: the C# sample of WeChat's
// WXBizMsgCrypt (a signed, encrypted callback) and the Java sample's
// encryption with a fixed random string.
const (
	sampleToken     = "QDG6eK"
	sampleAppID     = "wx5823bf96d3bd56c7"
	sampleAESKey    = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	sampleSignature = "477715d11cdb4164915debcba66cb864d751f3e6"
	sampleTimestamp = "1409659813"
	sampleNonce     = "1372623149"
	sampleEncrypt   = "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="

	javaAESKey  = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
	javaAppID   = "wxb11529c136998cb6"
	javaRandom  = "aaaabbbbccccdddd"
	javaMessage = "我是中文abcd123"
	javaEncrypt = "jn1L23DB+6ELqJ+6bruv21Y6MD7KeIfP82D6gU39rmkgczbWwt5+3bnyg5K55bgVtVzd832WzZGMhkP72vVOfg=="
)

func TestOfficialSampleOpens(t *testing.T) {
	c, err := wxcrypt.New(sampleToken, sampleAESKey, sampleAppID)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Open(sampleSignature, sampleTimestamp, sampleNonce, sampleEncrypt)
	if err != nil {
		t.Fatalf("the official sample does not open: %v", err)
	}
	if !bytes.HasPrefix(msg, []byte("<xml>")) || !bytes.Contains(msg, []byte(sampleAppID)) {
		t.Fatalf("decrypted sample = %q, want WeChat's XML to the app", msg)
	}
}

func TestOfficialSampleEncrypts(t *testing.T) {
	c, err := wxcrypt.New("pamtest", javaAESKey, javaAppID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Encrypt([]byte(javaMessage), [16]byte([]byte(javaRandom)))
	if err != nil {
		t.Fatal(err)
	}
	if got != javaEncrypt {
		t.Fatalf("Encrypt = %s, want the sample's %s", got, javaEncrypt)
	}
	back, err := c.Decrypt(got)
	if err != nil || string(back) != javaMessage {
		t.Fatalf("Decrypt = %q, %v", back, err)
	}
}

func TestRoundTripAndRefusals(t *testing.T) {
	c, err := wxcrypt.New("tok", sampleAESKey, "ww1234")
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("<xml><Event>TEMPLATESENDJOBFINISH</Event>" + strings.Repeat("x", 31) + "</xml>")
	enc, err := c.Encrypt(msg, [16]byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	sig := c.Sign("1700000000", "n1", enc)
	got, err := c.Open(sig, "1700000000", "n1", enc)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("round trip = %q, %v", got, err)
	}

	tampered := []byte(sig)
	tampered[0] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"tampered signature": func() ([]byte, error) { return c.Open(string(tampered), "1700000000", "n1", enc) },
		"other timestamp":    func() ([]byte, error) { return c.Open(sig, "1700000001", "n1", enc) },
		"other token": func() ([]byte, error) {
			o, _ := wxcrypt.New("other", sampleAESKey, "ww1234")
			return o.Open(sig, "1700000000", "n1", enc)
		},
		"no signature": func() ([]byte, error) { return c.Open("", "1700000000", "n1", enc) },
	} {
		if _, err := open(); !errors.Is(err, wxcrypt.ErrSignature) {
			t.Errorf("%s: err = %v, want ErrSignature", name, err)
		}
	}

	other, _ := wxcrypt.New("tok", sampleAESKey, "ww9999")
	if _, err := other.Open(sig, "1700000000", "n1", enc); !errors.Is(err, wxcrypt.ErrReceiveID) {
		t.Errorf("wrong receive id: err = %v, want ErrReceiveID", err)
	}
	wrongKey, _ := wxcrypt.New("tok", javaAESKey, "ww1234")
	if _, err := wrongKey.Open(wrongKey.Sign("1", "2", enc), "1", "2", enc); err == nil {
		t.Error("another key's Decrypt succeeded")
	}
	for _, bad := range []string{"not base64!", "AAAA", enc[:len(enc)-4]} {
		if _, err := c.Open(c.Sign("1", "2", bad), "1", "2", bad); !errors.Is(err, wxcrypt.ErrCiphertext) {
			t.Errorf("Encrypt %q: err = %v, want ErrCiphertext", bad, err)
		}
	}
}

func TestKeyMustBe43Base64Characters(t *testing.T) {
	for _, k := range []string{"", "short", sampleAESKey + "A", sampleAESKey[:42] + "!"} {
		if _, err := wxcrypt.New("tok", k, "id"); !errors.Is(err, wxcrypt.ErrKey) {
			t.Errorf("key %q: err = %v, want ErrKey", k, err)
		}
	}
}

func FuzzDecrypt(f *testing.F) {
	f.Add(sampleEncrypt)
	f.Add(javaEncrypt)
	c, err := wxcrypt.New(sampleToken, sampleAESKey, sampleAppID)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, enc string) {
		_, _ = c.Decrypt(enc) // never panics
	})
}
