(with-eval-after-load 'eglot
  (add-to-list 'eglot-server-programs
               '((python-mode python-ts-mode) . ("repocomp" "serve"))))
;; options (see Options) go in :initializationOptions, e.g. ("repocomp" "serve" :initializationOptions (:backend (:name "vllm")))
;; M-x eglot in a buffer of the repository; completion-at-point (C-M-i) shows the completion.
