// ESLint flat config: a small set of rules, each kept because it catches a bug or a lie the compiler
// lets through. No stylistic rules: formatting is not checked here.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**'] },
  {
    files: ['src/**/*.ts', 'test/**/*.ts', 'benchmarks/**/*.ts'],
    languageOptions: {
      parser: tseslint.parser,
      // Type-aware rules read the types tsc computes for tsconfig.json's files.
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    plugins: { '@typescript-eslint': tseslint.plugin },
    rules: {
      // A `!` or `as` that does not change the type hides nothing today but reads as a claim the
      // reader must check; with noUncheckedIndexedAccess on, the ones left are the ones that matter.
      '@typescript-eslint/no-unnecessary-type-assertion': 'error',
      // A promise nobody awaits or catches loses its rejection (an unhandled rejection ends the
      // process); ignoring one on purpose is written `void p`. node:test's test() and describe()
      // return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] },
          ],
        },
      ],
      // An async function passed where a void callback is expected (an event listener, forEach)
      // has its rejection dropped by the caller.
      '@typescript-eslint/no-misused-promises': 'error',
      // `await` of a value that is not a promise is a sign the callee is not what the reader thinks.
      '@typescript-eslint/await-thenable': 'error',
      // Dead names mislead; a name starting with _ marks a parameter or binding kept on purpose.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
      // `==` coerces ('' == 0); `== null` is allowed because it means "null or undefined".
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      // A case that falls into the next one must say so with a `// falls through` comment.
      'no-fallthrough': 'error',
      // An import used only for types is erased at build; `import type` says so, so a reader can tell
      // which imports load a module at run time.
      // `typeof import('…')` stays allowed: a benchmark uses it to type a module it loads from another build.
      '@typescript-eslint/consistent-type-imports': ['error', { disallowTypeAnnotations: false }],
    },
  },
);
