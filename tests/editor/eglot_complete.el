;;; eglot_complete.el --- Emacs + eglot against `repocomp serve'; run by tests/test_editor_emacs.py:
;;   SNIPPET=<the README's eglot snippet> FILE=<file> LINE=<1-based> OUT=<result file> \
;;     PREFETCHES=<file> emacs --batch -l eglot_complete.el
;; Configures eglot with the README's snippet, opens FILE, starts eglot, waits for the index, puts the cursor at
;; the end of LINE, types a space and deletes it, pauses 2 s and writes how many prefetches the server started at
;; a pause after edits to PREFETCHES, runs `completion-at-point' (C-M-i) and writes that line (or "ERROR: ...")
;; to OUT.
(require 'eglot)
(defun repocomp-test-wait (what limit-s predicate)
  (let ((deadline (+ (float-time) limit-s)))
    (while (not (funcall predicate))
      (when (> (float-time) deadline) (error "not within %s s: %s" limit-s what))
      (accept-process-output nil 0.1))))
(defun repocomp-test-ready (server)
  (let ((folders (plist-get (jsonrpc-request server :repocomp/stats nil :timeout 10) :folders)))
    (and (> (length folders) 0)
         (seq-every-p (lambda (f) (equal (plist-get f :state) "ready")) folders))))
(condition-case err
    (progn
      (load (getenv "SNIPPET") nil t)
      (find-file (getenv "FILE"))
      (call-interactively #'eglot)
      (repocomp-test-wait "eglot connected" 60 #'eglot-current-server)
      (let ((server (eglot-current-server)))
        (repocomp-test-wait "index ready" 60 (lambda () (repocomp-test-ready server))))
      (goto-char (point-min))
      (forward-line (1- (string-to-number (getenv "LINE"))))
      (end-of-line)
      (insert " ")
      (delete-char -1)
      ;; what eglot's idle timer does once Emacs has been idle 0.5 s (a batch Emacs is never idle)
      (eglot--signal-textDocument/didChange)
      (let ((deadline (+ (float-time) 2.0)))  ; the server's pause after the edits, and its prefetch
        (while (< (float-time) deadline) (accept-process-output nil 0.1)))
      (let ((prefetches (plist-get (jsonrpc-request (eglot-current-server) :repocomp/stats nil :timeout 10)
                                   :prefetches)))
        (write-region (format "%s" (plist-get prefetches :after_edits)) nil (getenv "PREFETCHES")))
      (completion-at-point)
      (write-region (buffer-substring (line-beginning-position) (line-end-position)) nil (getenv "OUT")))
  (error (write-region (format "ERROR: %S" err) nil (getenv "OUT"))))
(kill-emacs 0)
