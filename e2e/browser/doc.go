// Package browser tests the operator dashboard (/ui/) in a real browser:
// it builds the qunfa binary, runs `qunfa dev` on free ports with its own
// data directory and the mock provider, sets an account and a job up
// through the API, and drives headless Chromium with chromedp the way an
// operator would: log in, follow a job, pause and resume it from the
// buttons, filter failed items, export them as CSV, edit an account and
// switch language.
//
// The browser is Debian's chromium (/usr/bin/chromium, or QUNFA_CHROMIUM).
// Without it the tests skip, loudly; with QUNFA_REQUIRE_BROWSER=1 they fail
// instead. Screenshots (PNG) go to QUNFA_ARTIFACTS, by default
// e2e/browser/artifacts/ (git-ignored). QUNFA_E2E_BIN runs a prebuilt
// qunfa binary instead of building one.
package browser
