export { createGateway, type Gateway, type GatewayOptions, type GatewayService } from './gateway.js';
export type { RequestContext, InferenceKind } from './context.js';
export type { GatewayStage, StageResult } from './stages.js';
export { requestBudgetMs } from './prepare.js';
