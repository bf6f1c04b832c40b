// End-to-end: Express with express-rate-limit and the sluice store, against
// the sluice on 127.0.0.1:<port>. Prints one JSON line per request.
// Usage: node e2e.mjs <port> <store path> <limit>
import express from 'express'
import { rateLimit } from 'express-rate-limit'
import { createClient } from 'redis'
import { createRequire } from 'node:module'

const [port, storePath, limitArg] = process.argv.slice(2)
const limit = Number(limitArg)
const { SluiceStore } = createRequire(import.meta.url)(storePath)

const client = createClient({ url: `redis://127.0.0.1:${port}` })
await client.connect()
const app = express()
app.use(rateLimit({
	windowMs: 60_000,
	limit,
	standardHeaders: 'draft-8',
	legacyHeaders: false,
	identifier: 'api',
	store: new SluiceStore({ sendCommand: (...args) => client.sendCommand(args), prefix: 'e2e:' }),
}))
app.get('/', (req, res) => res.send('hello'))
const server = app.listen(0, '127.0.0.1')
await new Promise((resolve) => server.once('listening', resolve))
const url = `http://127.0.0.1:${server.address().port}/`
for (let i = 0; i <= limit; i++) {
	const res = await fetch(url)
	await res.text()
	console.log(JSON.stringify({
		status: res.status,
		ratelimit: res.headers.get('ratelimit'),
		policy: res.headers.get('ratelimit-policy'),
		retryAfter: res.headers.get('retry-after'),
	}))
}
server.close()
await client.quit()
