// Command sealbench times upstream's own HybridEncrypt (pkg/crypto, at the version go.mod
// pins) for benches/seal.rs: the same key, payload and label the Rust side seals.
//
//	sealbench -key pub.pem -payload file -label L -rounds 15 -per 200
//
// Prints the median wall time and the median CPU time (the whole process's, the Go
// runtime's threads included) per call in nanoseconds, over rounds of per calls each.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/bitnami-labs/sealed-secrets/pkg/crypto"
)

func main() {
	keyPath := flag.String("key", "", "PEM file with the RSA public key (PUBLIC KEY)")
	payloadPath := flag.String("payload", "", "file with the plaintext to seal")
	label := flag.String("label", "", "the OAEP label (the scope)")
	rounds := flag.Int("rounds", 15, "rounds")
	per := flag.Int("per", 200, "calls per round")
	flag.Parse()

	pemBytes, err := os.ReadFile(*keyPath)
	check(err)
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		fail("no PEM block in %s", *keyPath)
	}
	parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
	check(err)
	pub, ok := parsed.(*rsa.PublicKey)
	if !ok {
		fail("%s is not an RSA public key", *keyPath)
	}
	payload, err := os.ReadFile(*payloadPath)
	check(err)

	// Warm up (page faults, the GC's heap target) before anything is timed.
	for i := 0; i < *per; i++ {
		if _, err := crypto.HybridEncrypt(rand.Reader, pub, payload, []byte(*label)); err != nil {
			check(err)
		}
	}
	walls := make([]time.Duration, *rounds)
	cpus := make([]time.Duration, *rounds)
	for r := range walls {
		start, cpu := time.Now(), cpuTime()
		for i := 0; i < *per; i++ {
			if _, err := crypto.HybridEncrypt(rand.Reader, pub, payload, []byte(*label)); err != nil {
				check(err)
			}
		}
		walls[r] = time.Since(start) / time.Duration(*per)
		cpus[r] = (cpuTime() - cpu) / time.Duration(*per)
	}
	fmt.Println(median(walls).Nanoseconds(), median(cpus).Nanoseconds())
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// cpuTime is this process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sealbench: "+format+"\n", args...)
	os.Exit(1)
}
